"""corral.workflows.idle: the idle rule over steps' work and waits, the idle_since
transitions, the release policy and the wake time, against plain models."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from corral.workflows.idle import (
    IdleRun,
    RunState,
    StepState,
    Waiter,
    active_waiters,
    idle_transition,
    is_idle,
    release_due,
    wake_at,
)

WAIT = Waiter("Answer", "w1")
waiters = st.lists(
    st.builds(
        Waiter,
        st.sampled_from(["Answer", "Approval"]),
        st.text("abc", max_size=3),
        st.none() | st.floats(0, 1e6),
    ),
    max_size=3,
).map(tuple)
steps = st.builds(StepState, st.integers(0, 2), st.integers(0, 2), st.integers(0, 2), waiters)
runs = st.recursive(
    st.builds(
        RunState,
        st.booleans(),
        st.dictionaries(st.sampled_from(["a", "b", "c"]), steps, max_size=3),
        st.integers(0, 1),
    ),
    lambda kids: st.builds(
        RunState,
        st.booleans(),
        st.dictionaries(st.sampled_from(["a", "b", "c"]), steps, max_size=3),
        st.integers(0, 1),
        st.dictionaries(st.sampled_from(["x", "y"]), kids, max_size=2),
    ),
    max_leaves=4,
)


@given(runs)
def test_idle_is_running_without_work_and_with_a_wait(run: RunState) -> None:
    """The rule, stated over the steps: running, nothing queued, in progress or in
    backoff, nothing undelivered, some step waiting."""
    expected = (
        run.running
        and run.undelivered == 0
        and all(s.queue == s.in_progress == s.backoff == 0 for s in run.steps.values())
        and any(s.waiters for s in run.steps.values())
    )
    assert is_idle(run) is expected


@given(runs, runs)
def test_nested_runs_are_tracked_independently(run: RunState, child: RunState) -> None:
    """A child's work or waits change nothing of its parent's idleness."""
    with_child = RunState(run.running, run.steps, run.undelivered, {"kid": child})
    assert is_idle(with_child) is is_idle(run)


def test_several_waiters_idle_only_when_every_step_only_waits() -> None:
    both = RunState(steps={"a": StepState(waiters=(WAIT,)), "b": StepState(waiters=(WAIT,))})
    assert is_idle(both)
    one_busy = RunState(
        steps={"a": StepState(waiters=(WAIT,)), "b": StepState(in_progress=1, waiters=(WAIT,))}
    )
    assert not is_idle(one_busy)
    assert [s for s, _ in active_waiters(both)] == ["a", "b"]


def test_queued_events_with_waiters_are_not_idle() -> None:
    assert not is_idle(RunState(steps={"a": StepState(queue=1, waiters=(WAIT,))}))
    assert not is_idle(RunState(steps={"a": StepState(waiters=(WAIT,))}, undelivered=1))


def test_retry_backoff_is_not_idle() -> None:
    assert not is_idle(RunState(steps={"a": StepState(backoff=1), "b": StepState(waiters=(WAIT,))}))


def test_finished_or_waitless_runs_are_not_idle() -> None:
    assert not is_idle(RunState(running=False, steps={"a": StepState(waiters=(WAIT,))}))
    assert not is_idle(RunState(steps={"a": StepState()}))


@given(st.lists(st.tuples(st.booleans(), st.floats(0, 1e6)), max_size=30))
def test_idle_since_follows_the_transitions(observations: list[tuple[bool, float]]) -> None:
    """idle_since is the moment of the first idle observation of the current idle
    spell; each spell starts with one "idle" and ends with one "resumed"."""
    since: float | None = None
    spell_start: float | None = None
    for idle, now in observations:
        since, change = idle_transition(since, idle, now)
        if idle:
            if spell_start is None:
                assert change == "idle"
                spell_start = now
            else:
                assert change is None
            assert since == spell_start
        else:
            assert change == ("resumed" if spell_start is not None else None)
            spell_start = None
            assert since is None


idle_runs = st.lists(
    st.builds(
        IdleRun,
        st.text("abcdef", min_size=1, max_size=4),
        st.floats(0, 1000),
        st.floats(1, 500),
        st.booleans(),  # an operator asked that it be released
    ),
    max_size=20,
    unique_by=lambda r: r.handler_id,
)


@given(idle_runs, st.floats(0, 2000), st.integers(0, 25))
def test_release_due_is_overdue_runs_and_the_oldest_beyond_the_cap(
    runs: list[IdleRun], now: float, cap: int
) -> None:
    """The overdue runs, those an operator asked to release (whatever their delay) and
    the oldest beyond the cap, oldest first."""
    due = release_due(runs, now, cap)
    by_age = sorted(runs, key=lambda r: (r.idle_since, r.handler_id))
    overdue = {r.handler_id for r in runs if now - r.idle_since > r.release_after}
    requested = {r.handler_id for r in runs if r.requested}
    over_cap = {r.handler_id for r in by_age[: max(0, len(runs) - cap)]}
    assert set(due) == overdue | requested | over_cap
    assert len(runs) - len(due) <= cap
    assert due == [r.handler_id for r in by_age if r.handler_id in set(due)]  # oldest first


@given(waiters)
def test_wake_at_is_the_earliest_deadline(ws: tuple[Waiter, ...]) -> None:
    deadlines = [w.deadline for w in ws if w.deadline is not None]
    assert wake_at(ws) == (min(deadlines) if deadlines else None)
