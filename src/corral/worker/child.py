"""A task's child process, stopped the way corral stops processes: SIGTERM to its
process group, then SIGKILL once its grace is over (``corral worker`` on a shutdown
signal, a task timeout, or the operator's ``cancel_task``)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess

__all__ = ["KILL_GRACE", "stop_child"]

KILL_GRACE = 5.0  # seconds between SIGTERM and SIGKILL


def stop_child(proc: subprocess.Popen[bytes], grace: float = KILL_GRACE) -> None:
    """SIGTERM ``proc``'s process group (it was started with ``start_new_session``),
    SIGKILL it if it lingers past ``grace`` seconds; waits for it."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    except ProcessLookupError:
        pass
