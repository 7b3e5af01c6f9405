"""A supervised SDK worker of a chaos host: ``corral.Worker`` through the host's own
``corral serve`` (``$CHAOS_SERVE``), its node id the agent id the supervisor gives it.
Each task sleeps the seconds in its description (a little work) and answers which
process did it; a description ``FIRST/AGAIN`` sleeps FIRST seconds on a task's first
attempt and AGAIN on any later one (a run taken back and run again elsewhere)."""

from __future__ import annotations

import os
import sys
import time
from typing import Any

import corral


def handle(task: Any) -> dict[str, Any]:
    first, _, again = (task.description or "0.2").partition("/")
    try:
        seconds = float(again if again and task.attempts > 1 else first)
    except ValueError:
        seconds = 0.2
    time.sleep(seconds)
    return {"by": os.environ["CORRAL_AGENT_ID"], "pid": os.getpid()}


def main() -> int:
    worker = corral.Worker(
        role="developer",
        url=os.environ["CHAOS_SERVE"],
        heartbeat_interval=float(os.environ.get("CHAOS_BEAT", "2")),
        idle_timeout_seconds=3600,
        outage_tolerance=float(os.environ.get("CHAOS_TOLERANCE", "60")),
    )
    return worker.run(handle)


if __name__ == "__main__":
    sys.exit(main())
