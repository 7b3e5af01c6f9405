"""Server-sent events at /v1/events: cursor order, resume without gaps or repeats,
filters by kind and node."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import corral
from tests.support.backends.http import TOKEN, serving

AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, Any]]:
    with serving(tmp_path) as (url, _):
        client = corral.connect(url, token=TOKEN)
        try:
            yield url, client
        finally:
            client.close()


class Stream:
    """A minimal SSE reader: messages as (id, event, data); ``last_id`` follows
    id-only messages too, as a browser's EventSource does."""

    def __init__(self, url: str, *, last_id: int | None = None, **params: Any) -> None:
        headers = {**AUTH, "Accept": "text/event-stream"}
        if last_id is not None:
            headers["Last-Event-ID"] = str(last_id)
        self._http = httpx.Client(timeout=httpx.Timeout(10.0))
        self._cm = self._http.stream("GET", f"{url}/v1/events", headers=headers, params=params)
        self.response = self._cm.__enter__()
        assert self.response.status_code == 200, self.response.read()
        assert self.response.headers["content-type"].startswith("text/event-stream")
        self._lines = self.response.iter_lines()
        self.last_id: int | None = last_id

    def next(self) -> tuple[int, str, dict[str, Any]] | None:
        """The next message with data (None for an id-only one)."""
        import json

        fields: dict[str, str] = {}
        for line in self._lines:
            if line == "":
                if "id" in fields:
                    self.last_id = int(fields["id"])
                if "data" in fields:
                    return int(fields["id"]), fields["event"], json.loads(fields["data"])
                if "id" in fields:
                    return None
                fields = {}
                continue
            if line.startswith(":"):
                continue
            name, _, value = line.partition(":")
            fields[name] = value[1:] if value.startswith(" ") else value
        raise AssertionError("the stream ended")

    def take_until(self, seq: int, deadline: float = 10.0) -> list[tuple[int, str, dict[str, Any]]]:
        """Messages until the cursor reaches ``seq`` (or fail after ``deadline`` s)."""
        got = []
        end = time.monotonic() + deadline
        while (self.last_id or 0) < seq:
            assert time.monotonic() < end, f"stream stuck at {self.last_id}, want {seq}"
            msg = self.next()
            if msg is not None:
                got.append(msg)
        return got

    def close(self) -> None:
        self._cm.__exit__(None, None, None)
        self._http.close()


def _fill(client: Any, n: int) -> None:
    client.register_node("w1", "developer")
    client.register_node("w2", "architect")
    for i in range(n):
        client.add_task(f"implement part {i}")
        client.broadcast(f"note {i}", node_id="w1" if i % 2 else "w2")


def test_events_arrive_in_cursor_order(served: tuple[str, Any]) -> None:
    """Every event, each once, in seq order, with the event's kind and record."""
    url, client = served
    _fill(client, 20)
    expected = client.events(0, 10_000)
    stream = Stream(url)
    try:
        got = stream.take_until(expected[-1].seq)
    finally:
        stream.close()
    assert [m[0] for m in got] == [e.seq for e in expected]
    assert [m[1] for m in got] == [e.kind for e in expected]
    assert [m[2] for m in got] == [e.to_dict() for e in expected]


def test_live_events_arrive_while_written(served: tuple[str, Any]) -> None:
    """Events written while a client listens arrive, in order, without gaps."""
    url, client = served
    client.register_node("w1", "developer")
    stream = Stream(url)
    writer = threading.Thread(target=lambda: [client.add_task(f"t{i}") for i in range(50)])
    try:
        writer.start()
        writer.join()
        last = client.events(0, 10_000)[-1].seq
        got = stream.take_until(last)
    finally:
        stream.close()
    assert [m[0] for m in got] == list(range(1, last + 1))


def test_resume_from_last_event_id_loses_and_repeats_nothing(served: tuple[str, Any]) -> None:
    """A client that drops mid-stream and reconnects with Last-Event-ID gets exactly
    the events after the last one it saw, including those written while it was away."""
    url, client = served
    _fill(client, 10)
    first = Stream(url)
    seen = []
    try:
        for _ in range(7):
            msg = first.next()
            assert msg is not None
            seen.append(msg)
    finally:
        first.close()
    _fill_more = [client.add_task(f"while away {i}") for i in range(5)]
    assert _fill_more
    expected = client.events(0, 10_000)
    second = Stream(url, last_id=seen[-1][0])
    try:
        seen += second.take_until(expected[-1].seq)
    finally:
        second.close()
    assert [m[0] for m in seen] == [e.seq for e in expected]


def test_filters_by_kind_and_node_and_resume_with_filter(served: tuple[str, Any]) -> None:
    """?kind= and ?node= keep only matching events; the cursor still moves past the
    others, so a filtered client resumes without repeats."""
    url, client = served
    _fill(client, 6)
    events = client.events(0, 10_000)
    last = events[-1].seq
    stream = Stream(url, kind="broadcast", node="w1")
    try:
        got = stream.take_until(last)
    finally:
        stream.close()
    want = [e.seq for e in events if e.kind == "broadcast" and e.node_id == "w1"]
    assert want and [m[0] for m in got] == want
    assert stream.last_id == last  # moved past the filtered tail
    client.broadcast("after", node_id="w1")
    client.add_task("not a broadcast")
    newest = client.events(0, 10_000)[-1].seq
    again = Stream(url, last_id=stream.last_id, kind="broadcast,task_added")
    try:
        more = again.take_until(newest)
    finally:
        again.close()
    assert [(m[1], m[2]["data"].get("message")) for m in more] == [
        ("broadcast", "after"),
        ("task_added", None),
    ]


def test_json_events_without_stream_accept(served: tuple[str, Any]) -> None:
    """Without Accept: text/event-stream, /v1/events answers a JSON page."""
    url, client = served
    _fill(client, 2)
    r = httpx.get(f"{url}/v1/events", params={"since": 2, "kind": "task_added"}, headers=AUTH)
    assert r.status_code == 200
    assert [e["kind"] for e in r.json()] == ["task_added", "task_added"]
    assert all(e["seq"] > 2 for e in r.json())


@pytest.mark.parametrize("last_id", ["abc", "\u00b2", str(2**63), "9" * 5000])
def test_bad_last_event_id_is_refused(served: tuple[str, Any], last_id: str) -> None:
    """Not a number, a digit that is not ASCII, past a 64-bit integer, past
    Python's digit limit: a 400 that names the header."""
    url, _ = served
    headers = {**AUTH, "Accept": "text/event-stream", "Last-Event-ID": last_id.encode()}
    # httpx sends a bytes value as given: the non-ASCII id reaches the server as is.
    r = httpx.get(f"{url}/v1/events", headers=headers)  # type: ignore[arg-type]
    assert r.status_code == 400
    assert r.json()["error"]["field"] == "Last-Event-ID"


def test_an_event_number_past_64_bits_is_refused(served: tuple[str, Any]) -> None:
    url, _ = served
    r = httpx.get(f"{url}/v1/events", params={"since": 2**63}, headers=AUTH)
    assert r.status_code == 422
    assert r.json()["error"]["field"] == "since"
    r = httpx.get(f"{url}/v1/events", params={"since": 2**63 - 1}, headers=AUTH)
    assert r.status_code == 200 and r.json() == []
