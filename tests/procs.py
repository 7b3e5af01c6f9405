"""Code that runs in child processes (importable by the spawn start method)."""

from __future__ import annotations

from typing import Any

import corral


def register_when_released(url: str, node_id: str, barrier: Any, out: Any) -> None:
    """Register ``node_id`` as soon as every racer is at the barrier."""
    client = corral.connect(url)
    barrier.wait(timeout=30)
    try:
        client.register_node(node_id, "developer")
        out.put((node_id, "ok"))
    except corral.CapacityError:
        out.put((node_id, "capacity"))
    except Exception as exc:  # reported to the test, which fails on it
        out.put((node_id, f"error: {exc!r}"))
    finally:
        client.close()


def race_server(url_queue: Any, node_id: str, barrier: Any, out: Any) -> None:
    """Race once per URL received; stop on None."""
    while (url := url_queue.get()) is not None:
        register_when_released(url, node_id, barrier, out)


def claim_until_empty(url: str, node_id: str, barrier: Any, out: Any) -> None:
    """Claim and complete until the board is empty; report the task ids done."""
    client = corral.connect(url)
    client.register_node(node_id, "developer", heartbeat_interval=60)
    barrier.wait(timeout=60)
    done = []
    errors = []
    while True:
        try:
            task = client.claim_best_task(node_id, "developer")
            if task is None:
                break
            client.complete_task(task.id, node_id, task.epoch, result={"by": node_id})
            done.append(task.id)
        except corral.CorralError as exc:
            errors.append(repr(exc))
            break
    client.close()
    out.put((node_id, done, errors))


def work_until_killed(
    url: str, overrides: dict[str, Any], node_id: str, acks: str, outages: bool = False
) -> None:
    """Claim and complete until the board is empty or this process is killed. After
    each completion's answer, append ``"<task id> <epoch>"`` to the file ``acks``
    (unbuffered): the completions a caller was told happened. The steps alternate
    between ``complete_and_claim`` and ``complete_task`` + ``claim_best_task``.
    With ``outages`` (a server that is killed and restarted), a call that finds the
    store unavailable drops the task in hand (done or not, nobody was told) and claims
    again once the store is back."""
    import os
    import time

    client = corral.connect(url, **overrides)

    def when_back(call: Any) -> Any:
        deadline = time.monotonic() + 60
        while True:
            try:
                return call()
            except corral.StoreUnavailableError:
                if not outages or time.monotonic() > deadline:
                    raise
                time.sleep(0.01)

    when_back(lambda: client.register_node(node_id, "developer", heartbeat_interval=60))
    fd = os.open(acks, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    task = when_back(lambda: client.claim_best_task(node_id, "developer"))
    step = 0
    while task is not None:
        step += 1
        try:
            if step % 2:
                done, task = client.complete_and_claim(
                    task.id, node_id, "developer", task.epoch, result={"by": node_id}
                )
                os.write(fd, f"{done.id} {done.epoch}\n".encode())
            else:
                done = client.complete_task(task.id, node_id, task.epoch, result={"by": node_id})
                os.write(fd, f"{done.id} {done.epoch}\n".encode())
                task = client.claim_best_task(node_id, "developer")
        except corral.StoreUnavailableError:
            if not outages:
                raise
            task = when_back(lambda: client.claim_best_task(node_id, "developer"))
    os.write(fd, b"empty\n")
    client.close()
