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


def write_until_the_disk_is_full(path: str, out: Any) -> None:
    """With the files' size limited (``RLIMIT_FSIZE``: a write past it fails with
    EFBIG, a full disk as SQLite sees it), add tasks alone and in a group until the
    store says it is unavailable; then lift the limit and go on. Reports what each
    call said and what the store holds at each point."""
    import resource
    import signal

    from corral.errors import StoreUnavailableError
    from corral.store.sqlite import SQLiteStore

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write fails instead of killing us
    report: dict[str, Any] = {}
    c = corral.connect(f"sqlite:///{path}")
    assert isinstance(c, corral.Cluster)  # a database URL gives the embedded client
    try:
        c.register_node("A", "developer")
        assert isinstance(c.store, SQLiteStore)
        c.store._conn.execute("PRAGMA cache_size=20")  # dirty pages spill mid-transaction
        big = "x" * 19_000
        soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        resource.setrlimit(resource.RLIMIT_FSIZE, (200_000 + _size(path), hard))
        added = 0
        try:
            for _ in range(10_000):
                c.add_task(f"Implement alone {added}", description=big)
                added += 1
        except StoreUnavailableError as exc:
            report["alone_error"] = str(exc)
        report["alone_added"] = added
        report["tasks_after_alone"] = len(c.list_tasks(limit=10_000))
        answers = []
        try:
            with c.store.group():
                for i in range(40):
                    try:
                        c.add_task(f"Implement grouped {i}", description=big)
                        answers.append("ok")
                    except StoreUnavailableError as exc:
                        answers.append(f"unavailable: {exc}")
        except StoreUnavailableError as exc:
            report["group_error"] = str(exc)
        report["group_answers"] = answers
        report["tasks_after_group"] = len(c.list_tasks(limit=10_000))
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        task = c.add_task("Implement after space came back")
        claimed = c.claim_best_task("A", "developer")
        assert claimed is not None  # the task just added
        done = c.complete_task(claimed.id, "A", claimed.epoch)
        report["after"] = (task.id, done.status)
        report["tasks_at_end"] = len(c.list_tasks(limit=10_000))
    except BaseException as exc:  # reported to the test, which fails on it
        report["unexpected"] = f"{type(exc).__name__}: {exc}"
    finally:
        c.close()
        out.put(report)


def _size(path: str) -> int:
    import os

    return max(os.path.getsize(p) for p in (path, f"{path}-wal") if os.path.exists(p))
