"""Runner processes for the scheduler's concurrency tests (spawn start method)."""

from __future__ import annotations

import sys
import time
from typing import Any

import corral


def assign_and_release(url: str, runner_id: str, count: int, barrier: Any, out: Any) -> None:
    """Take and release ``count`` activations as fast as possible; report how many
    (and any error)."""
    client = corral.connect(url)
    client.register_node(runner_id, "runner", heartbeat_interval=120)
    barrier.wait(timeout=60)
    done, errors, empty = 0, [], 0
    while done < count and empty < 2000:
        try:
            a = client.get_assignment(runner_id, "hybrid")
            if a is None:
                empty += 1
                continue
            client.release_assignment(a.id, runner_id, a.epoch, {"inbox_read": len(a.inbox)})
            done += 1
        except corral.CorralError as exc:
            errors.append(repr(exc))
            break
    client.close()
    out.put((runner_id, done, errors))


def hold_until_killed(url: str, runner_id: str) -> None:
    """Take one activation, print ``<id> <epoch> <agent>`` and hold it until killed."""
    client = corral.connect(url)
    client.register_node(runner_id, "runner", heartbeat_interval=120)
    a = client.get_assignment(runner_id, "hybrid")
    assert a is not None
    print(a.id, a.epoch, a.agent_id, flush=True)
    while True:
        time.sleep(60)


if __name__ == "__main__":
    hold_until_killed(sys.argv[1], sys.argv[2])
