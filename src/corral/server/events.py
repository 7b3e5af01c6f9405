"""Server-sent events at ``/v1/events``: every event in cursor (``seq``) order.

The stream starts after ``Last-Event-ID`` (a reconnecting client) or ``?since=``;
each message carries ``id: <seq>``, so a client that reconnects resumes exactly
where it stopped: nothing lost, nothing repeated. ``kind`` and ``node`` filter; when
the last events of a batch are filtered out, an ``id:``-only message moves the
client's cursor past them without delivering anything.

New events are picked up when a write through this server wakes the stream, and
otherwise within ``sse_poll`` seconds (writes by other processes, the monitor).

A stream opened with a named token (``corral token create``) ends when that token is
revoked: a batch holding a ``token_revoked`` event (and each keepalive) has the token
looked up again, and a revoked one closes the stream before the batch is sent.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import anyio
from starlette.requests import Request
from starlette.responses import StreamingResponse

from corral.model import Event
from corral.server.errors import ApiError
from corral.validation import MAX_SEQ

if TYPE_CHECKING:
    from corral.server.app import ServerState

__all__ = ["KEEPALIVE_SECONDS", "format_event", "stream", "wants_stream"]

KEEPALIVE_SECONDS = 15.0
_BATCH = 1000


def wants_stream(request: Request) -> bool:
    return "text/event-stream" in request.headers.get("accept", "")


def format_event(e: Event) -> str:
    data = json.dumps(e.to_dict(), ensure_ascii=False, separators=(",", ":"))
    return f"id: {e.seq}\nevent: {e.kind}\ndata: {data}\n\n"


def _start(request: Request, since: int) -> int:
    last = request.headers.get("last-event-id")
    if last is None or not last.strip():
        return since
    text = last.strip()
    if not (text.isascii() and text.isdigit() and len(text) <= 19 and int(text) <= MAX_SEQ):
        raise ApiError(
            400,
            "bad_request",
            f"Last-Event-ID must be an event number (0 to {MAX_SEQ})",
            "Last-Event-ID",
        )
    return int(text)


def stream(request: Request, st: ServerState, query: Any) -> StreamingResponse:
    cursor = _start(request, query.since)
    kinds = set(query.kind.split(",")) if query.kind else None
    nodes = set(query.node.split(",")) if query.node else None
    cluster = st.cluster
    header = request.headers.get("authorization")
    named = st.tokens.named(header)

    async def revoked() -> bool:
        """Whether the stream's named token is gone (a store read)."""
        return named and await st.run(st.tokens.from_header, header) is None

    async def body() -> AsyncIterator[bytes]:
        nonlocal cursor
        yield b"retry: 1000\n\n"
        quiet_since = time.monotonic()
        while True:
            changed = st.changed()  # taken before reading, so no wake-up is missed
            batch: list[Event] = await st.run(cluster.events, cursor, _BATCH)
            if named and any(e.kind == "token_revoked" for e in batch) and await revoked():
                return
            if batch:
                out = [
                    format_event(e)
                    for e in batch
                    if (kinds is None or e.kind in kinds) and (nodes is None or e.node_id in nodes)
                ]
                cursor = batch[-1].seq
                if not out or not out[-1].startswith(f"id: {cursor}\n"):
                    out.append(f"id: {cursor}\n\n")
                yield "".join(out).encode()
                quiet_since = time.monotonic()
                if len(batch) == _BATCH:
                    continue
            elif time.monotonic() - quiet_since >= KEEPALIVE_SECONDS:
                if await revoked():
                    return
                yield b": keepalive\n\n"
                quiet_since = time.monotonic()
            with anyio.move_on_after(st.sse_poll):
                await changed.wait()

    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    return StreamingResponse(body(), media_type="text/event-stream", headers=headers)
