"""Processes for the usage and model-cap tests (tests/integration/test_usage_procs.py):
each connects once and acts when told, so a race is the registration itself, not a
connection's start-up."""

from __future__ import annotations

from typing import Any

import corral

USAGE = {"input_tokens": 3, "output_tokens": 5, "cost_usd": 0.000007}


def cap_racer(url: str, name: str, barrier: Any, trials: Any, out: Any) -> None:
    """For each trial number received (None: stop), wait at the barrier with the other
    racer, then register the node ``<name>-<trial>`` of the capped model ``opus``;
    report ``(trial, name, "ok" | "capacity" | "error: …")``."""
    client = corral.connect(url)
    try:
        while (trial := trials.get()) is not None:
            barrier.wait(timeout=60)
            try:
                client.register_node(f"{name}-{trial}", "developer", model="opus")
                out.put((trial, name, "ok"))
            except corral.CapacityError:
                out.put((trial, name, "capacity"))
            except Exception as exc:  # reported to the test, which fails on it
                out.put((trial, name, f"error: {exc!r}"))
    finally:
        client.close()


def usage_reporter(url: str, node_id: str, rounds: int, barrier: Any, out: Any) -> None:
    """Register ``node_id`` (model ``opus``), wait for every reporter, then ``rounds``
    times claim a task and make three reports of ``USAGE`` on it: a progress report,
    a heartbeat, and its completion (even rounds) or failure (odd ones); report
    ``(node_id, errors)``."""
    client = corral.connect(url)
    errors: list[str] = []
    try:
        client.register_node(node_id, "developer", model="opus", heartbeat_interval=60)
        barrier.wait(timeout=60)
        usage = USAGE
        for done in range(rounds):
            task = client.claim_best_task(node_id, "developer")
            if task is None:
                errors.append("the board ran out")
                break
            client.report_progress(task.id, node_id, epoch=task.epoch, usage=usage)
            client.heartbeat(node_id, usage=usage)
            if done % 2:
                client.fail_task(task.id, node_id, epoch=task.epoch, retry=False, usage=usage)
            else:
                client.complete_task(task.id, node_id, epoch=task.epoch, usage=usage)
    except corral.CorralError as exc:
        errors.append(repr(exc))
    finally:
        client.close()
    out.put((node_id, errors))


def completer(url: str, node_id: str, barrier: Any, out: Any) -> None:
    """Register ``node_id`` (model ``opus``), wait for the others, then complete tasks
    with ``USAGE`` (``complete_and_claim``) until the board is empty; report
    ``(node_id, completions, errors)``."""
    client = corral.connect(url)
    errors: list[str] = []
    done = 0
    try:
        client.register_node(node_id, "developer", model="opus", heartbeat_interval=60)
        barrier.wait(timeout=60)
        task = client.claim_best_task(node_id, "developer")
        while task is not None:
            _, task = client.complete_and_claim(
                task.id, node_id, "developer", epoch=task.epoch, usage=USAGE
            )
            done += 1
    except corral.CorralError as exc:
        errors.append(repr(exc))
    finally:
        client.close()
    out.put((node_id, done, errors))
