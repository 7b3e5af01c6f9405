"""The fast request path: short operations on the event loop never wait for the
store (they hop to a thread when it is busy), and the remote client's own HTTP/1.1
transport reads what servers send (lengths, chunks, closed keep-alive connections)."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import socket
import sqlite3
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

import corral
from corral.cluster import Cluster
from corral.errors import InvalidInputError, StoreUnavailableError
from corral.remote import HttpClient
from corral.server import create_app
from corral.server.auth import Principal, Tokens
from corral.server.shortcalls import _HOP, ShortCalls
from corral.store.base import WouldBlock
from tests.support.backends.http import TOKEN, serving


def _wait_for(cond: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.005)


@pytest.fixture
def local(tmp_path: Path) -> Iterator[Any]:
    c = corral.connect(f"sqlite:///{tmp_path / 'c.db'}")
    c.register_node("w1", "developer")
    yield c
    c.close()


def test_nowait_refuses_while_another_connection_holds_the_write_lock(
    local: Any, tmp_path: Path
) -> None:
    """Under ``nowait`` a write that would wait for another process raises
    WouldBlock and changes nothing; without it, it goes through."""
    before = local.get_node("w1").to_dict()
    other = sqlite3.connect(tmp_path / "c.db", isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(WouldBlock), local.store.nowait():
            local.heartbeat("w1", health_status="degraded")
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert local.get_node("w1").to_dict() == before
    assert local.heartbeat("w1", health_status="degraded").health == "degraded"


def test_nowait_refuses_while_another_thread_holds_the_store(local: Any) -> None:
    """Under ``nowait`` a call finding the store's lock taken by another thread
    raises WouldBlock at once instead of waiting for it."""
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with local.store._lock:  # what any running transaction of that thread holds
            held.set()
            release.wait(10)

    t = threading.Thread(target=hold)
    t.start()
    try:
        held.wait(10)
        t0 = time.monotonic()
        with pytest.raises(WouldBlock), local.store.nowait():
            local.get_node("w1")
        assert time.monotonic() - t0 < 1.0
    finally:
        release.set()
        t.join(10)
    assert local.get_node("w1").id == "w1"


def test_a_short_operation_waits_off_the_loop_when_the_database_is_locked(
    tmp_path: Path,
) -> None:
    """A heartbeat that meets another process's write lock hops to a thread: the
    event loop keeps answering meanwhile, and the heartbeat lands once the lock goes."""
    with serving(tmp_path) as (url, embedded):
        embedded.register_node("w1", "developer")
        client = corral.connect(url, token=TOKEN)
        other = sqlite3.connect(tmp_path / "served.db", isolation_level=None)
        other.execute("BEGIN IMMEDIATE")
        out: dict[str, Any] = {}
        worker = threading.Thread(
            target=lambda: out.setdefault("node", client.heartbeat("w1", health_status="degraded"))
        )
        try:
            worker.start()
            # The heartbeat has hopped to a thread that holds corral's writer lock and
            # waits for SQLite's (it cannot pass it).
            _wait_for(lambda: _writer_lock_taken(tmp_path / "served.db"))
            assert worker.is_alive()
            t0 = time.monotonic()
            r = httpx.get(f"{url}/openapi.json", timeout=5)
            assert r.status_code == 200
            assert time.monotonic() - t0 < 1.0
        finally:
            other.execute("ROLLBACK")
            other.close()
        worker.join(10)
        assert out["node"].health == "degraded"
        assert embedded.get_node("w1").health == "degraded"
        client.close()


def _writer_lock_taken(db: Path) -> bool:
    """Whether some store holds the writer lock file of ``db`` (SQLiteStore's flock)."""
    fd = os.open(f"{db}-lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # (closing also releases a lock this probe took)
    return False


async def _asgi_post(app: Any, path: str, token: str, body: bytes) -> tuple[int, Any]:
    """One POST straight to the ASGI app; (status, decoded JSON body)."""
    messages: list[Any] = []
    scope = {
        "type": "http",
        "method": "POST",
        "path": path,
        "root_path": "",
        "query_string": b"",
        "headers": [(b"authorization", f"Bearer {token}".encode())],
    }

    async def receive() -> Any:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: Any) -> None:
        messages.append(message)

    await app(scope, receive, send)
    return messages[0]["status"], json.loads(messages[1]["body"])


def test_short_calls_of_one_loop_turn_run_together_and_answer_each_request(
    local: Any,
) -> None:
    """Requests that arrive together have their short calls run back to back in one
    batch; each gets its own answer (a refusal or a missing node fails only its own
    request) and only the valid beats change the store."""
    local.register_node("w2", "developer")
    app = create_app(local, token=TOKEN, monitor=False, mcp=False)
    st = app.state
    tokens = st.tokens
    batches: list[int] = []
    run = st.short_calls._run

    def counting_run(loop: Any) -> None:
        batches.append(len(st.short_calls._queue))
        run(loop)

    st.short_calls._run = counting_run
    requests = [
        ("/v1/nodes/w1/heartbeat", tokens.node_token("w1"), b'{"health_status":"degraded"}'),
        ("/v1/nodes/w1/heartbeat", tokens.node_token("w2"), b'{"health_status":"unhealthy"}'),
        ("/v1/nodes/ghost/heartbeat", TOKEN, b"{}"),
        ("/v1/nodes/w2/heartbeat", tokens.node_token("w2"), b'{"health_status":"degraded"}'),
    ]

    async def all_at_once() -> list[tuple[int, Any]]:
        return await asyncio.gather(*(_asgi_post(app, *r) for r in requests))

    answers = asyncio.run(all_at_once())
    assert batches == [4]
    assert [status for status, _ in answers] == [200, 403, 404, 200]
    assert answers[0][1]["id"] == "w1" and answers[0][1]["health"] == "degraded"
    assert answers[1][1]["error"]["code"] == "forbidden"
    assert answers[2][1]["error"]["code"] == "not_found"
    assert answers[3][1]["id"] == "w2" and answers[3][1]["health"] == "degraded"
    assert local.get_node("w1").health == "degraded"
    assert local.get_node("w2").health == "degraded"


def test_a_short_call_cancelled_before_its_turn_never_runs() -> None:
    """A queued call whose request was cancelled is skipped; the others still run."""
    ran: list[str] = []
    calls = ShortCalls(contextlib.nullcontext, WouldBlock)

    def record(c: Any) -> Any:
        ran.append(c)
        return c

    # A text stands for each call (the queue only hands it back): not a Call.
    async def main() -> Any:
        first = calls.submit(record, "a")  # type: ignore[arg-type]
        second = calls.submit(record, "b")  # type: ignore[arg-type]
        first.cancel()
        return await second

    assert asyncio.run(main()) == "b"
    assert ran == ["b"]


def test_short_calls_left_queued_by_a_stopped_loop_do_not_stall_the_next() -> None:
    """A loop that stops before its turn leaves its calls unrun; the next loop's
    calls still run (and the stale ones never do)."""
    ran: list[str] = []
    calls = ShortCalls(contextlib.nullcontext, WouldBlock)
    first = asyncio.new_event_loop()

    def queue_and_stop() -> None:
        calls.submit(lambda c: ran.append(c), "stale")  # type: ignore[arg-type]
        first.stop()  # the loop ends this turn, before the batch's

    first.call_soon(queue_and_stop)
    first.run_forever()
    first.close()

    def record(c: Any) -> Any:
        ran.append(c)
        return c

    async def main() -> Any:
        return await calls.submit(record, "fresh")  # type: ignore[arg-type]  # a text for a Call

    assert asyncio.run(main()) == "fresh"
    assert ran == ["fresh"]


def test_a_short_call_that_would_wait_is_handed_back_to_hop() -> None:
    """A call raising WouldBlock under ``nowait`` answers the hop marker (its request
    runs it on a worker thread); the next call in the batch still runs inline."""
    calls = ShortCalls(contextlib.nullcontext, WouldBlock)

    def busy(c: Any) -> Any:
        raise WouldBlock("busy")

    async def main() -> list[Any]:
        futures = [calls.submit(busy, "a"), calls.submit(lambda c: c, "b")]  # type: ignore[arg-type]
        return [await f for f in futures]

    assert asyncio.run(main()) == [_HOP, "b"]


def test_a_turn_in_a_group_answers_after_its_commit_and_all_fail_with_it(
    tmp_path: Path,
) -> None:
    """With the store's group, a turn's calls commit together: their answers come
    once the commit is done (a second connection already sees every write), and
    when the commit fails every call of the turn gets the error and none of their
    writes is kept."""
    c = corral.connect(f"sqlite:///{tmp_path / 'g.db'}")
    assert isinstance(c, Cluster)  # a database URL gives the embedded client
    store = c.store
    seen: list[int] = []

    def committed_count() -> int:
        other = sqlite3.connect(tmp_path / "g.db")
        try:
            count: int = other.execute("SELECT count(*) FROM tasks").fetchone()[0]
            return count
        finally:
            other.close()

    def add(title: Any) -> Any:
        return c.add_task(title).title

    async def turn(calls: ShortCalls) -> list[Any]:
        futures = [calls.submit(add, "Implement a"), calls.submit(add, "Implement b")]  # type: ignore[arg-type]
        futures[0].add_done_callback(lambda _: seen.append(committed_count()))
        return await asyncio.gather(*futures, return_exceptions=True)

    grouped = ShortCalls(store.nowait, WouldBlock, store.group)
    assert asyncio.run(turn(grouped)) == ["Implement a", "Implement b"]
    assert seen == [2]  # the first answer was released after both were committed

    @contextlib.contextmanager
    def failing_group() -> Iterator[None]:
        with store.group():
            yield
            raise StoreUnavailableError("the commit failed")  # the group rolls back

    answers = asyncio.run(turn(ShortCalls(store.nowait, WouldBlock, failing_group)))
    assert [type(a) for a in answers] == [StoreUnavailableError] * 2
    assert committed_count() == 2 and len(c.list_tasks()) == 2
    c.close()


def test_a_lone_call_commits_by_itself_and_two_share_a_group(tmp_path: Path) -> None:
    """A turn with one call runs it as its own transaction (no group: nothing to
    share, and a savepoint less); a turn with two opens the group once. Either way
    the answer comes after the write is committed."""
    c = corral.connect(f"sqlite:///{tmp_path / 'lone.db'}")
    assert isinstance(c, Cluster)  # a database URL gives the embedded client
    store = c.store
    groups: list[int] = []

    @contextlib.contextmanager
    def counted_group() -> Iterator[None]:
        groups.append(1)
        with store.group():
            yield

    def add(title: Any) -> Any:
        return c.add_task(title).title

    async def turn(*titles: str) -> list[Any]:
        calls = ShortCalls(store.nowait, WouldBlock, counted_group)
        return await asyncio.gather(*(calls.submit(add, t) for t in titles))  # type: ignore[arg-type]

    assert asyncio.run(turn("Implement alone")) == ["Implement alone"]
    assert groups == []
    assert asyncio.run(turn("Implement a", "Implement b")) == ["Implement a", "Implement b"]
    assert groups == [1]
    other = sqlite3.connect(tmp_path / "lone.db")
    assert other.execute("SELECT count(*) FROM tasks").fetchone()[0] == 3
    other.close()
    c.close()


def _busy_store(path: Path) -> tuple[Any, Any, list[int], Any, Any, sqlite3.Connection]:
    """A store whose write lock another connection holds, and a group that counts the
    threads it runs on: (client, store, group threads, group, add a task, other)."""
    c = corral.connect(f"sqlite:///{path}")
    assert isinstance(c, Cluster)  # a database URL gives the embedded client
    store = c.store
    groups: list[int] = []

    @contextlib.contextmanager
    def counted_group() -> Iterator[None]:
        groups.append(threading.get_ident())
        with store.group():
            yield

    def add(title: Any) -> Any:
        return c.add_task(title).title

    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    return c, store, groups, counted_group, add, other


def test_a_turn_that_finds_the_store_busy_waits_as_one_group_on_the_executor(
    tmp_path: Path,
) -> None:
    """Another connection holds the write lock when a turn starts: with an executor
    the turn's calls are tried again on the loop for a few ms, then run there as one
    group, which waits for the lock and commits once; each request gets its own
    answer after that commit (none hops alone)."""
    c, store, groups, counted_group, add, other = _busy_store(tmp_path / "busy.db")

    async def turn(pool: Any) -> list[Any]:
        calls = ShortCalls(store.nowait, WouldBlock, counted_group, pool)
        pending = [calls.submit(add, t) for t in ("Implement a", "Implement b")]  # type: ignore[arg-type]
        await asyncio.sleep(0.2)  # the group waits for the other writer meanwhile
        assert not any(p.done() for p in pending)
        other.execute("ROLLBACK")
        return await asyncio.gather(*pending)

    with ThreadPoolExecutor(1) as pool:
        assert asyncio.run(turn(pool)) == ["Implement a", "Implement b"]
    loop_thread = threading.get_ident()
    # The loop's tries (the calls put back for a few ms), then one group on the
    # executor's thread for both calls.
    assert len(groups) >= 2 and groups[-1] != loop_thread
    assert all(g == loop_thread for g in groups[:-1])
    assert other.execute("SELECT count(*) FROM tasks").fetchone()[0] == 2
    other.close()
    c.close()


def test_a_turn_that_finds_the_store_busy_is_put_back_and_joins_the_next_one(
    tmp_path: Path,
) -> None:
    """Another writer holds the lock when a turn starts, and lets go at once: the
    turn's calls are put back, and the next turn's call brings them along, all in
    one group on the event loop (no executor thread, one commit)."""
    c, store, groups, counted_group, add, other = _busy_store(tmp_path / "back.db")

    async def turns(pool: Any) -> list[Any]:
        calls = ShortCalls(store.nowait, WouldBlock, counted_group, pool)
        pending = [calls.submit(add, t) for t in ("Implement a", "Implement b")]  # type: ignore[arg-type]
        await asyncio.sleep(0)  # their turn: the store is busy, they are put back
        assert len(groups) == 1 and not any(p.done() for p in pending)
        other.execute("ROLLBACK")
        pending.append(calls.submit(add, "Implement c"))  # type: ignore[arg-type]
        return await asyncio.gather(*pending)

    with ThreadPoolExecutor(1) as pool:
        assert asyncio.run(turns(pool)) == ["Implement a", "Implement b", "Implement c"]
    assert groups == [threading.get_ident()] * 2
    assert other.execute("SELECT count(*) FROM tasks").fetchone()[0] == 3
    other.close()
    c.close()


def test_remembered_tokens_never_admit_a_wrong_one() -> None:
    """A verified header is remembered; a tampered token, another node's token
    under a different key, or an operator token that changed are refused, before
    and after the valid one was seen."""
    tokens = Tokens("operator-secret")
    good = f"Bearer {tokens.node_token('w1')}"
    bad = good[:-1] + ("0" if good[-1] != "0" else "1")
    assert tokens.from_header(bad) is None
    for _ in range(2):
        principal = tokens.from_header(good)
        assert principal is not None and principal.node_id == "w1"
        assert tokens.from_header(bad) is None
        assert tokens.from_header("Bearer operator-secret") == Principal(None)
        assert tokens.from_header("Bearer operator-secreT") is None
    assert Tokens("rotated").from_header(good) is None


# --- the remote client's transport ------------------------------------------------------
class ScriptedServer:
    """Answers each request (read up to its body) with the next scripted bytes;
    ``close_after`` closes the connection after that response."""

    def __init__(self, responses: list[tuple[bytes, bool]]) -> None:
        self.responses = list(responses)
        self.connections = 0
        self.closed = 0  # connections this server has closed
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while self.responses:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            with conn:
                buf = b""
                while self.responses:
                    while b"\r\n\r\n" not in buf:
                        chunk = conn.recv(65536)
                        if not chunk:
                            break
                        buf += chunk
                    if b"\r\n\r\n" not in buf:
                        break
                    head, _, buf = buf.partition(b"\r\n\r\n")
                    length = 0
                    for line in head.split(b"\r\n"):
                        if line.lower().startswith(b"content-length:"):
                            length = int(line.split(b":")[1])
                    while len(buf) < length:
                        buf += conn.recv(65536)
                    buf = buf[length:]
                    response, close = self.responses.pop(0)
                    conn.sendall(response)
                    if close:
                        break
            self.closed += 1

    def close(self) -> None:
        self.sock.close()


def _ok(body: bytes, extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n%s\r\n%s" % (len(body), extra, body)


def test_client_reads_chunked_and_length_bodies_on_one_connection() -> None:
    """Content-Length and chunked bodies (with a trailer) on one keep-alive
    connection, and a 100 Continue before the real answer, all decode."""
    chunked = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        b'4\r\n{"a"\r\n3;x=1\r\n:[1\r\n2\r\n]}\r\n0\r\nX-T: 1\r\n\r\n'
    )
    server = ScriptedServer(
        [
            (_ok(b'{"n":1}'), False),
            (chunked, False),
            (b"HTTP/1.1 100 Continue\r\n\r\n" + _ok(b"[]"), False),
        ]
    )
    try:
        with HttpClient(f"http://127.0.0.1:{server.port}", token="t") as c:
            assert c.request("GET", "/x") == {"n": 1}
            assert c.request("POST", "/y", {"k": "v"}) == {"a": [1]}
            assert c.request("GET", "/z") == []
        assert server.connections == 1
    finally:
        server.close()


def test_client_reads_framing_fields_in_any_case_and_only_at_a_line_start() -> None:
    """Content-Length, Transfer-Encoding and Connection are found whatever their case
    and spacing; the same words inside another field's value frame nothing."""
    server = ScriptedServer(
        [
            (
                b"HTTP/1.1 200 OK\r\nX-Note: content-length: 99\r\n"
                b'CONTENT-LENGTH :  7\r\n\r\n{"n":2}',
                False,
            ),
            (
                b"HTTP/1.1 200 OK\r\nX-Note: connection: close\r\nTransfer-Encoding: Chunked\r\n"
                b"\r\n1\r\n3\r\n0\r\n\r\n",
                False,
            ),
            (_ok(b"4", b"CONNECTION: Close\r\n"), False),
            (_ok(b"5"), False),
        ]
    )
    try:
        with HttpClient(f"http://127.0.0.1:{server.port}", token="t") as c:
            assert c.request("GET", "/a") == {"n": 2}
            assert c.request("GET", "/b") == 3
            assert server.connections == 1
            assert c.request("GET", "/c") == 4
            assert c.request("GET", "/d") == 5
        assert server.connections == 2
    finally:
        server.close()


def test_client_records_ignore_fields_a_newer_server_adds(local: Any) -> None:
    """Records are built from the fields this client knows; unknown ones are dropped."""
    from corral.model import Node
    from corral.remote_calls import build as _build

    node = local.get_node("w1")
    assert _build(Node, node.to_dict()) == node
    assert _build(Node, {**node.to_dict(), "added_later": 1}) == node


def test_client_checks_node_ids_it_has_seen_before() -> None:
    """A node id's checked path is remembered; a bad id is refused every time."""
    from corral.remote_calls import segment

    assert segment("node_id", "w.1") == segment("node_id", "w.1") == "w%2E1"
    for _ in range(2):
        with pytest.raises(InvalidInputError):
            segment("node_id", " w1")
        with pytest.raises(InvalidInputError):
            segment("node_id", 7)


def test_client_reconnects_after_the_server_closes_an_idle_connection() -> None:
    """A keep-alive connection the server closed is replaced transparently; a
    ``Connection: close`` answer is honoured."""
    server = ScriptedServer(
        [(_ok(b"1"), True), (_ok(b"2", b"Connection: close\r\n"), False), (_ok(b"3"), False)]
    )
    try:
        with HttpClient(f"http://127.0.0.1:{server.port}", token="t") as c:
            assert c.request("GET", "/a") == 1
            _wait_for(lambda: server.closed == 1)  # the server has closed its end
            assert c.request("GET", "/b") == 2
            assert c.request("GET", "/c") == 3
        assert server.connections == 3
    finally:
        server.close()


def test_client_reports_a_server_that_is_not_there() -> None:
    """No server: StoreUnavailableError naming the URL, not a raw socket error."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with (
        HttpClient(f"http://127.0.0.1:{port}", token="t") as c,
        pytest.raises(StoreUnavailableError, match="is corral serve running"),
    ):
        c.settings()


def test_paths_that_differ_in_a_task_id_route_by_their_shape(tmp_path: Path) -> None:
    """Once ``POST /v1/tasks/N/complete`` has been matched, other task ids route from
    its learnt shape without asking Starlette's matcher again, each to the same op with
    its own id; another method on the same path is still Starlette's 405, and a node id
    made of digits is a shape of its own."""
    from tests.support.backends.http import free_port, start_uvicorn, stop_uvicorn

    embedded = corral.connect(f"sqlite:///{tmp_path / 'shape.db'}")
    app = create_app(embedded, token=TOKEN, monitor=False, mcp=False)
    matched: list[str] = []
    match = app._match

    def counted(scope: Any) -> Any:
        matched.append(scope["path"])
        return match(scope)

    app._match = counted
    server, thread = start_uvicorn(app, free_port())
    url = f"http://127.0.0.1:{server.config.port}"
    try:
        with HttpClient(url, token=TOKEN) as c:
            c.register_node("w1", "developer")
            c.register_node("42", "developer")
            ids = [c.add_task(f"Implement part {i}").id for i in range(3)]
            for _ in ids:
                t = c.claim_best_task("w1", "developer")
                assert t is not None
                done = c.complete_task(t.id, "w1", t.epoch)
                assert (done.id, done.status) == (t.id, "done")
            for _ in range(2):
                c.heartbeat("42")
            assert [t.status for t in c.list_tasks()] == ["done"] * 3
            assert [p for p in matched if p.endswith("/complete")] == [
                f"/v1/tasks/{ids[0]}/complete"
            ]
            assert matched.count("/v1/nodes/42/heartbeat") == 1
            with pytest.raises(corral.NotFoundError):
                c.get_task(999)
            assert c.get_task(ids[2]).id == ids[2]
        r = httpx.delete(
            f"{url}/v1/tasks/{ids[1]}/complete", headers={"Authorization": f"Bearer {TOKEN}"}
        )
        assert r.status_code == 405
    finally:
        stop_uvicorn(server, thread)
        embedded.close()


def test_a_shape_is_learnt_only_when_each_id_segment_is_one_whole_param(
    local: Any,
) -> None:
    """A param that spans an id segment (a ``path`` param such as ``q/17``) or two
    params equal to one value leave no shape; one whole param per id segment does,
    and other params are kept as they were matched."""
    app = create_app(local, token=TOKEN, monitor=False, mcp=False)
    op = object()

    def learn(path: str, params: dict[str, Any]) -> Any:
        segs = path.split("/")
        return app._learn(segs, app._shape(segs), (op, params))

    assert learn("/v1/q/17/x/18", {"a": "q/17", "b": "18"}) is None
    assert learn("/v1/17/y/17", {"a": "17", "b": "17"}) is None
    assert learn("/v1/k/17/tasks/18", {"a": "k", "b": "17", "c": "18"}) == (
        op,
        {"a": 2, "b": 3, "c": 5},
        {},
    )
    # A segment that is literal text of some route is kept in the shape, and its
    # param with it.
    assert learn("/v1/nodes/tasks/heartbeat", {"node_id": "tasks"}) == (
        op,
        {},
        {"node_id": "tasks"},
    )
    shape = app._shape(["", "v1", "nodes", "w-1", "heartbeat"])
    assert shape == app._shape(["", "v1", "nodes", "w.2%", "heartbeat"])
    assert shape != app._shape(["", "v1", "nodes", "17", "heartbeat"])
    assert shape != app._shape(["", "v1", "nodes", "", "heartbeat"])


def test_ten_thousand_node_ids_keep_the_route_cache_at_the_routes_size(local: Any) -> None:
    """Every node beating through its own path: the cache holds one entry per route
    and method reached, not one per node id, and each id routes to its own node."""
    app = create_app(local, token=TOKEN, monitor=False, mcp=False)
    for i in range(10_000):
        for path in (f"/v1/nodes/w{i}/heartbeat", f"/v1/nodes/w{i}.x/claim"):
            scope = {"type": "http", "method": "POST", "path": path, "root_path": ""}
            op, params = app._route(scope, "POST", path)
            assert params["node_id"] == path.split("/")[3]
            assert op.path.endswith(path.rsplit("/", 1)[1])
    routes = sum(len(getattr(r, "methods", None) or ()) for r in app.routes)
    assert len(app._shapes) <= routes
    assert len(app._shapes) == 2 and app._cache == {}
