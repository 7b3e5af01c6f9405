"""A real worker process for the tests, and helpers to drive it.

Run as ``python tests/support/worker_app.py --url URL --id W1 --dir DIR [...]``. Its handler
writes ``DIR/started-<id>-<task>`` when it takes a task, then waits for ``DIR/gate``
(unless the task's description contains "quick") and returns ``{"by": <id>}``.
"""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

HERE = Path(__file__).resolve()


def wait_for(
    cond: Callable[[], T], timeout: float = 10.0, interval: float = 0.02, what: str = "condition"
) -> T:
    """Poll ``cond`` until it returns something truthy; fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def spawn(url: str, node_id: str, workdir: Path, *args: str) -> subprocess.Popen[bytes]:
    """Start this module as a worker process; its log goes to ``workdir/<id>.log``."""
    env = {**os.environ, "PYTHONPATH": str(HERE.parents[2] / "src")}
    cmd = [sys.executable, str(HERE), "--url", url, "--id", node_id, "--dir", str(workdir), *args]
    with open(workdir / f"{node_id}.log", "ab") as log:
        return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)


def log_text(workdir: Path, node_id: str) -> str:
    path = workdir / f"{node_id}.log"
    return path.read_text() if path.exists() else ""


def main(argv: list[str] | None = None) -> int:
    import corral
    from corral.worker.destinations import MetricsDestination, RetryPolicy, WebhookDestination

    p = argparse.ArgumentParser()
    p.add_argument("--url", required=True)
    p.add_argument("--id", required=True)
    p.add_argument("--dir", required=True)
    p.add_argument("--role", default="developer")
    p.add_argument("--interval", type=float, default=0.2)
    p.add_argument("--idle-timeout", type=float, default=60.0)
    p.add_argument("--webhook", default=None)
    p.add_argument("--metrics-keep", type=int, default=None)
    p.add_argument("--retry-attempts", type=int, default=3)
    p.add_argument("--retry-delay", type=float, default=0.05)
    a = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format=f"{a.id}: %(message)s", stream=sys.stderr)
    workdir = Path(a.dir)
    cluster = corral.connect(a.url)
    extra: list[Any] = []
    if a.webhook:
        extra.append(WebhookDestination(a.webhook, timeout=2.0))
    if a.metrics_keep:
        extra.append(MetricsDestination(cluster, keep=a.metrics_keep))

    def handle(task: corral.Task) -> dict[str, Any]:
        (workdir / f"started-{a.id}-{task.id}").touch()
        if "quick" not in task.description:
            while not (workdir / "gate").exists():
                time.sleep(0.02)
        return {"by": a.id}

    worker = corral.Worker(
        a.id,
        a.role,
        cluster=cluster,
        heartbeat_interval=a.interval,
        idle_timeout_seconds=a.idle_timeout,
        destinations=extra,
        retry=RetryPolicy(retry_attempts=a.retry_attempts, retry_delay=a.retry_delay),
    )
    code = worker.run(handle)
    print(f"{a.id}: exit {code} ({worker.exit_reason}); refused={worker.refused}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
