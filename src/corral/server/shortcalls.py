"""Short calls: the operations marked ``short`` whose requests arrived in one turn of
the event loop, run back to back at the start of the next, under the store's
``nowait()`` and, on SQLite, as one group commit (``corral.server.dispatch`` queues
them; see its docstring for why)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Executor
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from corral.server.generic import Call

__all__ = ["ShortCalls"]


# A turn whose group cannot start (another process or thread holds the store) puts its
# calls back and tries again at the loop's next turns for _RETRY_SPIN seconds (a short
# group holds the lock briefly), then at the next turn that brings more calls or after
# _RETRY_PAUSE, for up to _PUT_BACK_SECONDS; then they run on the executor as one group
# that waits for the store (and gives up after the busy timeout).
_RETRY_SPIN = 0.0003
_RETRY_PAUSE = 0.001
_PUT_BACK_SECONDS = 0.005
_HOP = object()  # a short call met a busy store: run it on a worker thread


class ShortCalls:
    """Short calls queued during one turn of the event loop, run back to back (in
    the order they came) at the start of the next, under the store's ``nowait()``:
    a call that would wait answers ``_HOP`` without having done anything, and its
    request runs it on a worker thread.

    With ``group`` (the SQLite store's ``group()``), the turn's calls share one
    commit: each is a savepoint (its failure undoes only itself), and their answers
    are released only once the commit is done, so each answer is still durable. If
    the group cannot start (the store is busy), every call hops; if its commit
    fails, every call of the turn gets that error and none of their writes is kept.
    Event loop only."""

    def __init__(
        self,
        nowait: Callable[[], Any],
        would_block: type[Exception],
        group: Callable[[], Any] | None = None,
        executor: Executor | None = None,
    ) -> None:
        self._nowait = nowait
        self._would_block = would_block
        self._group = group
        # With an executor, a turn whose group cannot start (another process or thread
        # holds the store) waits for it on the loop a little (``_put_back``), then runs
        # there as one group, waiting for the store, instead of each call hopping
        # alone: the calls still share one commit (several ``corral serve`` workers on
        # one SQLite file meet each other's commits often).
        self._executor = executor
        self._queue: list[tuple[Callable[[Call], Any], Call, asyncio.Future[Any]]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._retry: asyncio.TimerHandle | None = None  # calls put back: their next try
        self._again = False  # a try is scheduled for this turn's end
        self._busy_since: float | None = None  # the first try that found the store busy

    def submit(self, handler: Callable[[Call], Any], call: Call) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        if not self._queue or loop is not self._loop:
            # (A queue left by a loop that stopped before its turn never ran: drop it.)
            self._queue = []
            self._loop = loop
            self._retry = None
            self._busy_since = None
            loop.call_soon(self._run, loop)
        elif self._retry is not None and not self._again:
            # Calls put back: try again at the end of this turn, with this one.
            self._again = True
            loop.call_soon(self._run, loop)
        self._queue.append((handler, call, future))
        return future

    def _run(self, loop: asyncio.AbstractEventLoop) -> None:
        if loop is not self._loop:
            return  # scheduled by a loop that has since been replaced
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None
        self._again = False
        queue, self._queue = self._queue, []
        if not queue:
            return  # (a try scheduled twice: the first took the calls)
        if self._group is None or len(queue) == 1:  # a lone call commits by itself
            with self._nowait():
                for future, ok, value in self._calls(queue):
                    _settle(future, ok, value)
            return
        answers: list[tuple[asyncio.Future[Any], bool, Any]] = []
        try:
            with self._nowait(), self._group():
                self._busy_since = None
                answers = list(self._calls(queue))
        except self._would_block:  # the group could not start: nothing ran
            if self._executor is None:
                for _, _, future in queue:
                    _settle(future, True, _HOP)
            elif not self._put_back(loop, queue):
                self._executor.submit(self._waiting_group, loop, queue)
            return
        except Exception as exc:  # the shared commit failed: none of it is kept
            for future, _, _ in answers:
                _settle(future, False, exc)
            return
        for future, ok, value in answers:
            _settle(future, ok, value)

    def _put_back(self, loop: asyncio.AbstractEventLoop, queue: list[Any]) -> bool:
        """Keep a turn's calls, whose group found the store busy, for a try at the
        loop's next turn (for the first ``_RETRY_SPIN``), then at its next turn that
        brings calls (``submit``) or after ``_RETRY_PAUSE``; False once they have
        been put back for ``_PUT_BACK_SECONDS``.

        With several ``--workers`` the store is busy when another process commits
        (each holds the write lock for a turn's group). Waiting for it on the
        executor cost more than the wait: its thread, holding the lock once it got
        it, vied with the event loop for the GIL, and slept between tries
        (``_WriterLock``) while the lock was free. Here the loop goes on reading
        requests meanwhile, the waiting calls and the new ones share the next group,
        and a try that fails is cheap (a non-blocking ``flock`` in ``group()``)."""
        now = time.monotonic()
        if self._busy_since is None:
            self._busy_since = now
        elif now - self._busy_since >= _PUT_BACK_SECONDS:
            self._busy_since = None
            return False
        self._queue = queue + self._queue
        if now - self._busy_since < _RETRY_SPIN:
            self._again = True  # (no second try from submit)
            loop.call_soon(self._run, loop)
        else:
            self._retry = loop.call_later(_RETRY_PAUSE, self._run, loop)
        return True

    def _waiting_group(self, loop: asyncio.AbstractEventLoop, queue: list[Any]) -> None:
        """On the executor: the turn's calls as one group that may wait for the store;
        their answers settled on the loop once the commit is done."""
        assert self._group is not None
        answers: list[tuple[asyncio.Future[Any], bool, Any]] = []
        try:
            with self._group():
                answers = list(self._calls(queue))
        except Exception as exc:  # the shared commit failed: none of it is kept
            answers = [(future, False, exc) for _, _, future in queue]
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nobody waits
            loop.call_soon_threadsafe(_settle_all, answers)

    def _calls(self, queue: list[Any]) -> Iterator[tuple[asyncio.Future[Any], bool, Any]]:
        """Run each queued call; (future, succeeded, result or exception)."""
        would_block = self._would_block
        for handler, call, future in queue:
            if future.done():
                continue  # its request was cancelled before its turn: nothing ran
            try:
                result = handler(call)
            except would_block:
                yield future, True, _HOP
            except Exception as exc:
                yield future, False, exc
            else:
                yield future, True, result


def _settle_all(answers: list[tuple[asyncio.Future[Any], bool, Any]]) -> None:
    for future, ok, value in answers:
        _settle(future, ok, value)


def _settle(future: asyncio.Future[Any], ok: bool, value: Any) -> None:
    if future.done():
        return  # cancelled meanwhile
    if ok:
        future.set_result(value)
    else:
        future.set_exception(value)
