"""Running ``corral up`` as a real process in a temporary directory, for the fleet's
tests and bench: start, read its JSON lines, read the cluster's events, stop."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

import corral

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
FLEET_FILES = ("fleet.toml", "tasks.jsonl", "relay.py", "fleet_worker.py")


def wait_for(cond: Callable[[], Any], timeout: float = 30.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while not (value := cond()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)
    return value


def env(**extra: str) -> dict[str, str]:
    e = dict(os.environ)
    for k in ("CORRAL_SUPERVISOR", "CORRAL_AGENT_ID", "CORRAL_TOKEN", "CORRAL_URL"):
        e.pop(k, None)
    e["PATH"] = str(Path(sys.executable).parent) + os.pathsep + e.get("PATH", "")
    e.update(extra)
    return e


def copy_example(dest: Path) -> Path:
    """A fresh copy of the fleet example (what a fresh clone has)."""
    for name in FLEET_FILES:
        shutil.copy(EXAMPLES / name, dest / name)
    return dest / "fleet.toml"


def corral_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "corral", *args]


class Up:
    """``corral up MANIFEST --port 0 --json`` in ``directory``; its lines kept."""

    def __init__(
        self,
        directory: Path,
        manifest: str = "fleet.toml",
        url: str | None = None,
        **extra_env: str,
    ) -> None:
        self.directory = directory
        self.proc = subprocess.Popen(
            corral_cmd("up", manifest, "--port", "0", "--json"),
            cwd=directory,
            env=env(**extra_env),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        self.lines: list[dict[str, Any]] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        try:
            self.info = wait_for(self._banner, 30, "corral up's banner")
        except BaseException:
            self.kill(close_cluster=False)
            raise
        self.url = url or f"sqlite:///{directory / '.corral' / 'corral.db'}"
        self.cluster = corral.connect(self.url)

    def _banner(self) -> dict[str, Any] | None:
        found = next((x for x in self.lines if x.get("event") == "up"), None)
        if found is None and self.proc.poll() is not None:
            err = self.proc.stderr.read() if self.proc.stderr else ""
            raise AssertionError(f"corral up exited {self.proc.returncode}: {err}")
        return found

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with contextlib.suppress(ValueError):
                self.lines.append(json.loads(line))

    def events(self, kind: str | None = None) -> list[Any]:
        out: list[Any] = []
        since = 0
        while batch := self.cluster.events(since, 10_000):
            out += batch
            since = batch[-1].seq
        return [e for e in out if kind is None or e.kind == kind]

    def scaled(self, pool: str | None = None) -> list[Any]:
        return [
            e
            for e in self.events("alert")
            if e.data.get("reason") == "pool_scaled"
            and (pool is None or e.data.get("pool") == pool)
        ]

    def done(self) -> int:
        return len(self.cluster.list_tasks(status="done", limit=10_000))

    def descendants(self) -> list[psutil.Process]:
        with contextlib.suppress(psutil.NoSuchProcess):
            return psutil.Process(self.proc.pid).children(recursive=True)
        return []

    def stop(self, sig: int = signal.SIGINT, timeout: float = 30.0) -> int:
        """Signal ``corral up`` and wait for it; its exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        finally:
            self.cluster.close()
            self._close_pipes()

    def _close_pipes(self) -> None:
        """Close both pipes once the reader is done with stdout. A process of the
        group still holding stdout open keeps the reader in its read (closing a file
        another thread reads fails, and the file would then be left to the garbage
        collector's ResourceWarning in some later test): the group is killed first."""
        self._reader.join(5)
        if self._reader.is_alive():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self._reader.join(10)
        for f in (self.proc.stdout, self.proc.stderr):
            if f is not None:
                f.close()

    def kill(self, *, close_cluster: bool = True) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)
        if close_cluster:
            self.cluster.close()
        self._close_pipes()


def marked(directory: Path) -> list[psutil.Process]:
    """Processes whose environment carries this directory's supervisor marker."""
    state = str(directory / ".corral" / "supervisor")
    found = []
    for p in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if state in p.environ().get("CORRAL_SUPERVISOR", "") or any(
                state in arg for arg in p.cmdline()
            ):
                found.append(p)
    return found
