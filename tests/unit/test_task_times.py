"""Tasks with time and order, as pure rules: a failed attempt's backoff
(``backoff.retry_ready_at``) and the monitor's task deadlines
(``deadlines.task_due``, ``deadlines.task_timeout_at``), and the stores' reads of them
(index heads, range scans) equal to those rules after random histories on the fake
clock."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from corral import Monitor
from corral.backoff import retry_ready_at
from corral.cluster import Cluster
from corral.deadlines import task_due, task_timeout_at
from corral.defaults import RETRY_BACKOFF_CAP
from corral.errors import CorralError

T = 1_700_000_000.0


def test_backoff_doubles_per_attempt_from_the_failure() -> None:
    """retry_backoff 10: attempt 1 -> +10 s, 2 -> +20 s, 3 -> +40 s, from ``now``."""
    assert [retry_ready_at(10, a, T) for a in (1, 2, 3, 4)] == [T + 10, T + 20, T + 40, T + 80]


def test_backoff_is_capped() -> None:
    """The doubling stops at RETRY_BACKOFF_CAP (an hour), however many attempts."""
    assert retry_ready_at(10, 30, T) == T + RETRY_BACKOFF_CAP
    assert retry_ready_at(10, 10_000, T) == T + RETRY_BACKOFF_CAP
    assert retry_ready_at(1, 5, T, cap=4) == T + 4


def test_a_backoff_above_the_cap_is_used_as_given() -> None:
    assert retry_ready_at(2 * RETRY_BACKOFF_CAP, 3, T) == T + 2 * RETRY_BACKOFF_CAP


@pytest.mark.parametrize("backoff", [None, 0, 0.0])
def test_no_backoff_is_at_once(backoff: float | None) -> None:
    assert retry_ready_at(backoff, 3, T) is None


@given(
    backoff=st.floats(0.001, 1e6, allow_nan=False),
    attempt=st.integers(1, 200),
    now=st.floats(0, 1e10, allow_nan=False),
)
def test_backoff_grows_and_never_passes_its_cap(backoff: float, attempt: int, now: float) -> None:
    at = retry_ready_at(backoff, attempt, now)
    nxt = retry_ready_at(backoff, attempt + 1, now)
    assert at is not None and nxt is not None
    assert now + min(backoff, RETRY_BACKOFF_CAP) <= at <= nxt
    assert at <= now + max(backoff, RETRY_BACKOFF_CAP)


# --- the stores' task deadlines against the rules ----------------------------------------
step = st.one_of(
    st.tuples(
        st.just("add"),
        st.sampled_from([None, 0.5, 2.0, 10.0]),  # not_before, from now
        st.sampled_from([None, 1.0, 3.0]),  # timeout
        st.sampled_from([None, 0.5, 2.0]),  # retry_backoff
    ),
    st.tuples(st.just("claim")),
    st.tuples(st.just("fail")),
    st.tuples(st.just("complete")),
    st.tuples(st.just("advance"), st.sampled_from([0.25, 0.5, 1.0, 3.0])),
    st.tuples(st.just("tick")),
)


def _apply(c: Cluster, monitor: Monitor, op: tuple[Any, ...]) -> None:
    now = c.clock.now()
    try:
        if op[0] == "add":
            not_before = None if op[1] is None else now + op[1]
            c.add_task("a job", not_before=not_before, timeout=op[2], retry_backoff=op[3])
        elif op[0] == "claim":
            c.register_node("w", "developer")
            c.claim_best_task("w", "developer")
        elif op[0] in ("fail", "complete"):
            held = c.list_tasks(status="in_progress", limit=1)
            if held:
                t = held[0]
                if op[0] == "fail":
                    c.fail_task(t.id, t.assigned_to or "", t.epoch, error="flaky")
                else:
                    c.complete_task(t.id, t.assigned_to or "", t.epoch)
        elif op[0] == "advance":
            c.clock.advance(op[1])  # type: ignore[attr-defined]
        else:
            _check_tick(c, monitor)
    except CorralError:
        pass  # a refusal (a node retired meanwhile) is part of the history


def _check_tick(c: Cluster, monitor: Monitor) -> None:
    """A pass at now acts on exactly the tasks the rules say are due."""
    now = c.clock.now()
    tasks = c.list_tasks(limit=10_000)
    ready, timed_out = task_due(tasks, now)
    events = monitor.tick(now).events
    assert {e.task_id for e in events if e.kind == "task_ready"} == ready
    assert {e.task_id for e in events if e.kind == "task_timed_out"} == timed_out


def _check_heads(c: Cluster) -> None:
    """The store's two deadlines (index heads) are the rules' earliest ones."""
    tasks = c.list_tasks(limit=10_000)
    want_ready = min(
        (t.ready_at for t in tasks if t.status == "scheduled" and t.ready_at is not None),
        default=None,
    )
    want_timeout = min((at for t in tasks if (at := task_timeout_at(t)) is not None), default=None)
    due = c.store.deadlines()
    assert (due.task_ready_at, due.task_timeout_at) == (want_ready, want_timeout)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(history=st.lists(step, min_size=1, max_size=25))
def test_store_task_deadlines_equal_the_rules_after_any_history(
    embedded: Cluster, history: list[tuple[Any, ...]]
) -> None:
    """The fixture's cluster carries over between examples."""
    embedded.configure(max_attempts=3)
    monitor = Monitor(embedded)
    for op in history:
        _apply(embedded, monitor, op)
        _check_heads(embedded)
