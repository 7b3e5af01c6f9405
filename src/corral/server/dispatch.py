"""The JSON API's request path as plain ASGI: route, auth, parse, call, answer.

Per request, on the event loop:

- **route**: a ``(method, shape)`` cache in front of Starlette's own route matching,
  so the rules stay Starlette's (the first full match wins; misses, 404s, 405s and
  redirects go through the Starlette app unchanged) and a node's repeated
  ``POST /v1/nodes/N/heartbeat`` costs one dict lookup. A path's shape keeps the
  segments that are literal text of some route and blanks the others (ids: all-digit
  ones and the rest told apart, for the ``int`` converter), so the cache holds one
  entry per route and method, however many node and task ids call it. A shape's
  entry is learnt from the first match when each blanked segment is one path
  parameter, whole (an id holding ``/`` is matched by Starlette each time);
- **auth** from the raw ``Authorization`` header (``Tokens`` remembers the header
  values it verified, so a node's repeated calls cost no HMAC);
- **parse**: pydantic validates the body straight from bytes, the query string with
  the op's query model; any problem is a 4xx envelope before the service is called;
- **call**: operations marked ``short`` (one bounded transaction) run on the event
  loop under the SQLite store's ``nowait()``: when another thread or process holds
  the store they raise ``WouldBlock`` before doing anything and the call hops to a
  worker thread instead. The short calls whose requests arrived in one turn of the
  loop run back to back, in arrival order, each in its own transaction, at the start
  of the next turn (``ShortCalls``): the store's path stays in the CPU's caches
  from one call to the next instead of being evicted by the HTTP work between them
  (less server CPU per heartbeat under load: docs/performance.md). A turn that finds the store
  busy (another ``--workers`` process or the monitor writing) is put back and tried
  again with the next turn's calls (for up to 5 ms; then it runs on a worker thread
  as one group that waits for it), so its calls still share one commit. Every other operation
  (PostgreSQL, scans, batches, waiting claims) hops to a thread once. The hop costs
  more than the transaction on a loaded 2-core machine (docs/performance.md);
- **answer**: JSON bytes from ``pydantic_core.to_json`` (the same values as
  ``json.dumps`` would write, a float's exponent aside: ``1e-7`` for ``1e-07``;
  several times faster), as two ASGI messages.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import re
import time
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError
from pydantic_core import to_json
from starlette.datastructures import QueryParams
from starlette.requests import Request
from starlette.routing import Match, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from corral.errors import CorralError
from corral.server import events as sse
from corral.server.errors import ApiError, envelope, from_exception, from_validation
from corral.server.generic import Call, Endpoint
from corral.server.shortcalls import _HOP, ShortCalls

if TYPE_CHECKING:
    from corral.server.app import ServerState

__all__ = [
    "MAX_BODY_BYTES",
    "ApiRouter",
    "OpEndpoint",
    "ShortCalls",
    "allowed_methods",
    "dumps",
    "send_error",
]

log = logging.getLogger("corral.server")

MAX_BODY_BYTES = 32 * 1024 * 1024
_ROUTE_CACHE_SIZE = 4096
_JSON = b"application/json"
_TEXT = b"text/plain; charset=utf-8"


class _Disconnected(Exception):
    """The client went away before its request body arrived."""


_NOT_HERE: Any = object()  # a route matched a path that names another resource: 405


def dumps(value: Any) -> bytes:
    """Compact UTF-8 JSON of the service's data: plain values and ``corral.model``
    records (a record is written field for field, as its ``to_dict()``)."""
    return to_json(value)


async def _send(send: Send, status: int, body: bytes, ctype: bytes, extra: Any = ()) -> None:
    headers = [(b"content-length", str(len(body)).encode()), (b"content-type", ctype), *extra]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def send_error(send: Send, exc: ApiError) -> None:
    extra = [(b"www-authenticate", b"Bearer")] if exc.status == 401 else ()
    await _send(send, exc.status, envelope(exc.code, exc.message, exc.field), _JSON, extra)


async def _read_body(receive: Receive, length: bytes | None) -> bytes:
    if length is not None and length.isdigit() and int(length) > MAX_BODY_BYTES:
        raise ApiError(413, "too_large", f"the body is larger than {MAX_BODY_BYTES} bytes")
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise _Disconnected
        chunk = message.get("body", b"")
        if chunk:
            size += len(chunk)
            if size > MAX_BODY_BYTES:
                raise ApiError(413, "too_large", f"the body is larger than {MAX_BODY_BYTES} bytes")
            chunks.append(chunk)
        if not message.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)


async def _disconnected(receive: Receive) -> None:
    """Return once the client has gone (the request's body already read)."""
    while (await receive())["type"] != "http.disconnect":
        pass


async def _claim_while_connected(
    st: ServerState, op: Endpoint, call: Call, receive: Receive
) -> Any:
    """A waiting claim (``wait`` > 0) that claims only while its caller is there:
    the same loop as ``Cluster.claim_best_task`` (take the wake-up token, try a
    claim, wait for a wake-up until the deadline), the wait on a thread, the
    client's disconnect watched meanwhile. A caller that is gone is not given a
    task: it is checked just before each try, and on SQLite the try runs on the
    event loop (``nowait``) in the same step as that check and the answer, so a
    disconnect cannot fall between them. A try that had to run on a thread (a busy
    store, PostgreSQL) and finds its caller gone on return hands the task back at
    once (``Store.release_claim``: pending again, the attempt undone, the node as it
    was before the try). None when the caller is gone."""
    loop = asyncio.get_running_loop()
    gone = loop.create_task(_disconnected(receive))
    store = st.cluster.store
    now = Call(
        call.cluster,
        call.principal,
        call.tokens,
        call.path,
        call.query,
        call.body.model_copy(update={"wait": 0}),
    )
    deadline = time.monotonic() + call.body.wait
    try:
        while True:
            token = store.ready_token()
            result: Any = _HOP  # or the handler's answer
            if gone.done():
                return None
            if st.nowait is not None:
                try:
                    with st.nowait():
                        result = op.handler(now)
                except st.would_block:
                    result = _HOP
            if result is _HOP:
                before, result = await st.run(_try_claim, op, now)
                if gone.done():
                    await _hand_back(st, result["task"], before)
                    return None
            left = deadline - time.monotonic()
            if result["task"] is not None or left <= 0:
                return result
            waiter = loop.run_in_executor(st.wait_pool, store.wait_ready, token, left)
            await asyncio.wait((waiter, gone), return_when=asyncio.FIRST_COMPLETED)
            if gone.done():
                _wake(store)  # free the waiting thread now, not at its deadline
                return None
    finally:
        gone.cancel()


def _try_claim(op: Endpoint, call: Call) -> tuple[Any, Any]:
    """One try of a waiting claim on a thread, with the node as it was just before
    it (what a hand-back restores)."""
    return call.cluster.get_node(call.path["node_id"]), op.handler(call)


async def _hand_back(st: ServerState, task: Any, before: Any) -> None:
    """Give back a claim nobody received, as if it had not been made."""
    if task is None:
        return
    release = functools.partial(st.cluster.store.release_claim, before=before)
    try:
        await st.run(release, task.id, task.assigned_to, task.epoch, st.cluster.clock.now())
    except CorralError:
        log.warning("could not hand back task %s of a gone caller", task.id, exc_info=True)


def _wake(store: Any) -> None:
    """Wake the claims waiting on ``store`` (each re-checks and waits again)."""
    store.wake_waiters()


def _refusal(exc: ValidationError, where: str) -> ApiError:
    """The envelope of a request model's refusal: a parameter's rule's own (its
    message, naming the parameter), else pydantic's first problem."""
    for err in exc.errors(include_url=False, include_input=False):
        rule = err.get("ctx", {}).get("error")
        if isinstance(rule, CorralError):
            return from_exception(rule)
    return from_validation(exc, where)


def _query(op: Endpoint, raw: bytes) -> Any:
    params = QueryParams(raw) if raw else None
    if op.query is None:
        if params:
            raise ApiError(422, "invalid_input", f"unknown query parameter {next(iter(params))!r}")
        return None
    if params and len(params.multi_items()) != len(params):
        # Every query parameter is one value (the OpenAPI document says so): not a list.
        twice = next(k for k in params if len(params.getlist(k)) > 1)
        raise ApiError(
            422, "invalid_input", f"query parameter {twice!r} is given more than once", twice
        )
    try:
        return op.query.model_validate(dict(params) if params else {})
    except ValidationError as exc:
        raise _refusal(exc, "query") from None


def _no_fields(raw: bytes) -> None:
    """Refuse a body with any field for an operation that takes none (an empty body or
    ``{}`` is fine): unknown arguments are errors, not ignored."""
    if not raw or raw.isspace():
        return
    try:
        given = json.loads(raw)
    except ValueError as exc:
        raise ApiError(400, "bad_request", f"the body is not valid JSON: {exc}") from None
    if not isinstance(given, dict):
        raise ApiError(422, "invalid_input", "body: Input should be an object", "body")
    if given:
        name = next(iter(given))
        message = f"{name}: Extra inputs are not permitted (this operation takes no body fields)"
        raise ApiError(422, "invalid_input", message, name)


async def handle(
    st: ServerState,
    op: Endpoint,
    path_params: dict[str, Any],
    scope: Scope,
    receive: Receive,
    send: Send,
) -> None:
    """Answer one request for ``op`` (its route already matched)."""
    t0 = time.perf_counter()
    auth = length = accept = None
    for name, value in scope["headers"]:
        if name == b"authorization":
            auth = auth if auth is not None else value
        elif name == b"content-length":
            length = length if length is not None else value
        elif name == b"accept":
            accept = accept if accept is not None else value
    try:
        header = None if auth is None else auth.decode("latin-1")
        principal = await st.authenticate(header, op.op.caller, writes=op.writes)
        query = _query(op, scope.get("query_string", b""))
        if (
            op.op.exception == "event_stream"
            and accept is not None
            and b"text/event-stream" in accept
        ):
            response = sse.stream(Request(scope, receive), st, query)
            st.metrics.observe(op.method, op.path, 200, time.perf_counter() - t0)
            await response(scope, receive, send)
            return
        body = None
        if op.body is not None:
            raw = await _read_body(receive, length)
            try:
                body = op.body.model_validate_json(b"{}" if not raw or raw.isspace() else raw)
            except ValidationError as exc:
                raise _refusal(exc, "body") from None
        elif op.writes:  # a write whose arguments are all in its path: no field is known
            _no_fields(await _read_body(receive, length))
        call = Call(st.cluster, principal, st.tokens, path_params, query, body)
        waits = op.op.exception == "waiting_claim" and bool(getattr(body, "wait", 0))
        if waits:
            result = await _claim_while_connected(st, op, call, receive)
            if result is None:
                return  # the caller went away: nothing was taken, nobody to answer
        elif op.op.short and st.short_calls is not None:
            result = await st.short_calls.submit(op.handler, call)
            if result is _HOP:
                result = await st.run(op.handler, call)
        else:
            result = await st.run(op.handler, call, waits=waits)
        if op.writes:
            st.notify()
        status = op.op.status
        if op.op.exception == "text_answer":
            await _send(send, status, result.encode(), _TEXT)
        else:
            await _send(send, status, dumps(result), _JSON)
    except _Disconnected:
        return
    except ApiError as exc:
        status = exc.status
        await send_error(send, exc)
    except CorralError as exc:
        err = from_exception(exc)
        status = err.status
        await send_error(send, err)
    except Exception:
        log.exception("unexpected error in %s", op.op.name, extra={"action": "server_error"})
        status = 500
        await send_error(send, ApiError(500, "internal", "internal error; see the log"))
    st.metrics.observe(op.method, op.path, status, time.perf_counter() - t0)


class OpEndpoint:
    """The ASGI endpoint Starlette routes ``op`` to (path params in the scope)."""

    def __init__(self, op: Endpoint, st: ServerState) -> None:
        self.op = op
        self.st = st

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await handle(self.st, self.op, scope.get("path_params", {}), scope, receive, send)


_TEMPLATE_PARAM = re.compile(r"\{[^}]*\}")


def _specific(routes: list[Any], path: str) -> tuple[int, list[Any]]:
    """The routes of the most specific template matching ``path`` (the most literal
    text: ``/v1/nodes/w1/claim`` is ``/v1/nodes/{node_id}/claim``, not the node
    ``w1/claim``; ``/v1/tasks/batch`` is not task ``batch``)."""
    best: tuple[int, list[Any]] = (-1, [])
    for route in routes:
        regex = getattr(route, "path_regex", None)
        if regex is None or not getattr(route, "methods", None) or not regex.match(path):
            continue
        literal = len(_TEMPLATE_PARAM.sub("", route.path))
        if literal > best[0]:
            best = (literal, [route])
        elif literal == best[0]:
            best[1].append(route)
    return best


def allowed_methods(routes: list[Any], path: str) -> list[str]:
    """The methods of the resource ``path`` names (HEAD with GET), sorted, as the
    OpenAPI document lists them."""
    return sorted({m for route in _specific(routes, path)[1] for m in route.methods})


def _digits(segment: str) -> bool:
    """An all-ASCII-digit path segment (a task id)."""
    return segment.isascii() and segment.isdigit()


_ID = "\0id"  # a blanked segment (a shape's), never a path's
_NUM = "\0num"  # a blanked all-digit segment


class ApiRouter:
    """Cached ``(method, shape) -> op`` in front of the Starlette app ``fallback``,
    whose routes (in order) decide every match the cache does not hold yet.
    ``mounts`` maps a path prefix (``/mcp``) to the app that serves it and what is
    under it, scope unchanged."""

    def __init__(
        self,
        fallback: ASGIApp,
        routes: list[Any],
        st: ServerState,
        *,
        mounts: dict[str, ASGIApp] | None = None,
    ) -> None:
        self.fallback = fallback
        self.routes = routes
        self.st = st
        self.mounts = dict(mounts or {})
        # (method, shape) -> (op, {param: segment index}, params of no blanked
        # segment), or _NOT_HERE (405) or None (not an operation: mounts, fallback).
        self._shapes: dict[tuple[str, tuple[str, ...]], Any] = {}
        # Paths whose match cannot be keyed by shape (a parameter of several segments).
        self._cache: dict[tuple[str, str], tuple[Endpoint, dict[str, Any]] | None] = {}
        # The literal segments of every route: a path segment among them is kept in
        # its shape, any other is an id. A route matches the same way every path of
        # one shape: its literals meet the same kept segments, and a parameter's
        # converter (str, int, path) sees a non-empty segment, digits or not.
        self._literals: set[str] = set()
        for route in routes:
            for seg in getattr(route, "path", "").split("/"):
                if _digits(seg):  # a literal id-like segment would make shapes ambiguous
                    raise ValueError(f"route {route.path} has an all-digit segment")
                if "{" in seg and not (seg.startswith("{") and seg.endswith("}")):
                    raise ValueError(f"route {route.path} has a segment partly a parameter")
                if "{" not in seg:
                    self._literals.add(seg)

    def _shape(self, segments: list[str]) -> tuple[str, ...]:
        lit = self._literals
        return tuple(
            seg if seg in lit or not seg else (_NUM if _digits(seg) else _ID) for seg in segments
        )

    def _match(self, scope: Scope) -> tuple[Endpoint, dict[str, Any]] | None:
        """The op of the route that serves the request, among those of the most
        specific template matching its path; ``_NOT_HERE`` when none takes its
        method (405); None for what Starlette answers (non-API routes)."""
        _, specific = _specific(self.routes, scope["path"])
        for route in specific:
            match, child = route.matches(scope)
            if match is Match.FULL:
                endpoint = route.endpoint if isinstance(route, Route) else None
                if isinstance(endpoint, OpEndpoint):
                    return endpoint.op, child.get("path_params", {})
                return None
        return _NOT_HERE if specific else None

    def _learn(
        self, segs: list[str], shape: tuple[str, ...], hit: tuple[Endpoint, dict[str, Any]]
    ) -> tuple[Endpoint, dict[str, int], dict[str, Any]] | None:
        """``hit`` as a shape's entry when every blanked segment of the path is the
        whole value of one of its params (so another id routes the same way)."""
        blanked = [i for i, seg in enumerate(shape) if seg is _ID or seg is _NUM]
        op, params = hit
        where: dict[str, int] = {}
        fixed: dict[str, Any] = {}
        for name, value in params.items():
            spots = [i for i in blanked if segs[i] == value]
            if len(spots) == 1 and isinstance(value, str):
                where[name] = spots[0]
            else:
                fixed[name] = value
        # Params are disjoint parts of the path: when each blanked segment is one whole
        # param, no other param holds any of it, and the others stay as they are.
        if sorted(where.values()) != blanked:
            return None
        return op, where, fixed

    def _route(
        self, scope: Scope, method: str, path: str
    ) -> tuple[Endpoint, dict[str, Any]] | None:
        """The op and params for the request (or ``_NOT_HERE``, or None), cached."""
        segs = path.split("/")
        shape = self._shape(segs)
        try:
            known = self._shapes[(method, shape)]
        except KeyError:
            pass
        else:
            if known is None or known is _NOT_HERE:
                return known
            op, where, fixed = known
            return op, {**fixed, **{name: segs[i] for name, i in where.items()}}
        key = (method, path)
        try:
            return self._cache[key]
        except KeyError:
            pass
        hit = self._match(scope)
        entry = hit if hit is None or hit is _NOT_HERE else self._learn(segs, shape, hit)
        if entry is not None or hit is None or hit is _NOT_HERE:
            # Junk paths have shapes too (kept where literal): the bound only guards
            # against a client walking the combinations of the routes' literals.
            if len(self._shapes) >= _ROUTE_CACHE_SIZE:
                self._shapes.clear()
            self._shapes[(method, shape)] = entry
        else:
            if len(self._cache) >= _ROUTE_CACHE_SIZE:
                self._cache.clear()
            self._cache[key] = hit
        return hit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.fallback(scope, receive, send)
            return
        path = scope["path"]
        if not scope.get("root_path"):
            method = scope["method"]
            hit = self._route(scope, method, path)
            if hit is _NOT_HERE:
                allow = ", ".join(allowed_methods(self.routes, path))
                exc = ApiError(405, "method_not_allowed", f"{method} is not allowed on {path}")
                await _send(
                    send, 405, envelope(exc.code, exc.message), _JSON, [(b"allow", allow.encode())]
                )
                return
            if hit is not None:
                op, params = hit
                await handle(self.st, op, dict(params), scope, receive, send)
                return
        for prefix, app in self.mounts.items():
            if path == prefix or path.startswith(prefix + "/"):
                await app(scope, receive, send)
                return
        await self.fallback(scope, receive, send)
