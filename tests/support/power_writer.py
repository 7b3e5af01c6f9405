"""A writer for tests/integration/test_power_loss.py, run under strace: ``python -m
tests.support.power_writer URL SYNCHRONOUS NODE STEPS ACKS``. It claims and completes
``STEPS`` times (alternating ``complete_and_claim`` and ``complete_task`` +
``claim_best_task``), checkpointing often, and after each completion's answer
appends ``"<task id> <epoch>\\n"`` to the file ``ACKS`` with one ``write``."""

from __future__ import annotations

import os
import sys

import corral
import corral.store.sqlite.store as sqlite_store


def main(url: str, synchronous: str, node_id: str, steps: int, acks: str) -> None:
    # Checkpoints every 20 commits and a WAL restart past 100 pages (instead of 200 and
    # 1,000), so a short traced run copies its WAL back and starts it over many times.
    # The store reads them as its module's globals (imported from corral.defaults, not
    # re-exported): the run lowers them there.
    sqlite_store.SQLITE_CHECKPOINT_EVERY = 20  # type: ignore[attr-defined]
    sqlite_store.SQLITE_WAL_RESTART_PAGES = 100  # type: ignore[attr-defined]
    client = corral.connect(url, synchronous=synchronous)
    client.register_node(node_id, "developer", heartbeat_interval=60)
    fd = os.open(acks, os.O_WRONLY | os.O_APPEND)
    task = client.claim_best_task(node_id, "developer")
    for step in range(steps):
        if task is None:
            break
        if step % 2:
            done, task = client.complete_and_claim(task.id, node_id, "developer", task.epoch)
            os.write(fd, f"{done.id} {done.epoch}\n".encode())
        else:
            done = client.complete_task(task.id, node_id, task.epoch)
            os.write(fd, f"{done.id} {done.epoch}\n".encode())
            task = client.claim_best_task(node_id, "developer")
    os.close(fd)
    client.close()


if __name__ == "__main__":
    url, sync, node, steps, acks = sys.argv[1:]
    main(url, sync, node, int(steps), acks)
