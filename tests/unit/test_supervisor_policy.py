"""The supervisor's pure decisions, driven by a fake clock and an injected rand."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corral.clock import FakeClock
from corral.supervisor.policy import (
    EXHAUSTED_FLAG,
    TRANSITIONS,
    Beat,
    Exit,
    RestartConfig,
    RestartTracker,
    State,
    TransitionError,
    agent_deadline,
    can_transition,
    check_transition,
    decide,
    heartbeat_expired,
    next_deadline,
    parse_heartbeat,
    should_restart,
    startup_expired,
)

SCHEDULE = [1.0, 2.0, 4.0, 8.0, 16.0, 16.0, 16.0, 16.0, 16.0, 16.0]

# ---- the state machine ------------------------------------------------------------


def test_legal_transitions_follow_the_state_machine() -> None:
    S = State
    legal = {
        (S.STOPPED, S.STARTING),
        (S.STARTING, S.RUNNING),
        (S.STARTING, S.UNHEALTHY),
        (S.STARTING, S.STOPPED),
        (S.STARTING, S.WAITING),
        (S.RUNNING, S.UNHEALTHY),
        (S.RUNNING, S.WAITING),
        (S.RUNNING, S.STOPPED),
        (S.UNHEALTHY, S.STARTING),
        (S.UNHEALTHY, S.STOPPED),
        (S.UNHEALTHY, S.RUNNING),
        (S.WAITING, S.RUNNING),
        (S.WAITING, S.UNHEALTHY),
        (S.WAITING, S.STOPPED),
        # held: a start comes due while a dependency is not RUNNING, then spawned
        (S.STOPPED, S.WAITING),
        (S.UNHEALTHY, S.WAITING),
        (S.WAITING, S.STARTING),
    }
    assert set(TRANSITIONS) == set(State)
    for old, new in itertools.product(State, State):
        assert can_transition(old, new) == ((old, new) in legal), (old, new)
        if (old, new) in legal:
            assert check_transition(old, new) is new
        else:
            with pytest.raises(TransitionError, match=f"{old} -> {new}"):
                check_transition(old, new)


def test_states_are_their_names() -> None:
    assert [str(s) for s in State] == ["STOPPED", "STARTING", "RUNNING", "UNHEALTHY", "WAITING"]


# ---- restart policies × exit kinds --------------------------------------------------

EXIT_KINDS = {
    "code 0": (0, None),
    "code 1": (1, None),
    "signal": (None, signal.SIGKILL),
}
EXPECTED = {
    ("always", "code 0"): True,
    ("always", "code 1"): True,
    ("always", "signal"): True,
    ("on-failure", "code 0"): False,
    ("on-failure", "code 1"): True,
    ("on-failure", "signal"): True,
    ("never", "code 0"): False,
    ("never", "code 1"): False,
    ("never", "signal"): False,
}


@pytest.mark.parametrize(("policy", "kind"), sorted(EXPECTED))
def test_each_policy_with_each_exit_kind(policy: str, kind: str) -> None:
    code, sig = EXIT_KINDS[kind]
    assert should_restart(policy, code, sig, stopped_by_operator=False) is EXPECTED[policy, kind]
    # an agent the operator stopped stays stopped whatever its policy
    assert should_restart(policy, code, sig, stopped_by_operator=True) is False


@pytest.mark.parametrize(("policy", "kind"), sorted(EXPECTED))
def test_decide_on_real_process_exits(policy: str, kind: str) -> None:
    """The same table with the status of real processes (exit 0, exit 1, SIGKILL)."""
    script = {
        "code 0": "raise SystemExit(0)",
        "code 1": "raise SystemExit(1)",
        "signal": "import os, signal; os.kill(os.getpid(), signal.SIGKILL)",
    }[kind]
    proc = subprocess.Popen([sys.executable, "-c", script])
    _, status = os.waitpid(proc.pid, 0)
    proc.returncode = 0  # reaped here; keep Popen from waiting again
    ended = Exit.from_wait_status(status, at=100.0)
    assert (ended.code, ended.signal) == EXIT_KINDS[kind]
    tracker = RestartTracker(rand=lambda: 0.0)
    d = decide(policy, ended, stopped_by_operator=False, tracker=tracker, now=100.0)
    assert d.restart is EXPECTED[policy, kind]
    if d.restart:
        assert (d.delay, d.restart_at) == (1.0, 101.0)
        assert tracker.restarts == 1
    else:
        assert d.reason == "policy"
        assert tracker.restarts == 0
    stopped = decide(policy, ended, stopped_by_operator=True, tracker=tracker, now=101.0)
    assert (stopped.restart, stopped.reason) == (False, "operator")


def test_unknown_exit_status_counts_as_a_failure() -> None:
    assert should_restart("on-failure", None, None, stopped_by_operator=False)
    assert Exit().describe() == "unknown"


def test_bad_policy_is_refused() -> None:
    with pytest.raises(ValueError, match="always, on-failure or never"):
        should_restart("sometimes", 1, None, stopped_by_operator=False)


def test_exit_constructors_and_descriptions() -> None:
    assert Exit.from_returncode(-9) == Exit(signal=9)
    assert Exit.from_returncode(3, at=5.0) == Exit(code=3, at=5.0)
    assert Exit.from_siginfo(os.CLD_EXITED, 0).clean
    assert Exit.from_siginfo(os.CLD_KILLED, 15) == Exit(signal=15)
    assert Exit.from_siginfo(os.CLD_DUMPED, 11) == Exit(signal=11)
    assert Exit(code=1).describe() == "exit code 1"
    assert Exit(signal=signal.SIGKILL).describe() == "killed by SIGKILL"
    assert not Exit(signal=15).clean and not Exit().known


# ---- backoff ------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(min_value=0.0, max_value=0.999999), min_size=9, max_size=9))
def test_backoff_follows_its_schedule_plus_jitter(rands: list[float]) -> None:
    clock = FakeClock()
    draws = iter(rands)
    tracker = RestartTracker(rand=lambda: next(draws))
    for step, r in enumerate(rands):
        clock.advance(0.5)
        d = tracker.record_restart(clock.now())
        assert d.restart
        assert d.delay == pytest.approx(SCHEDULE[step] + 0.5 * r)
        assert SCHEDULE[step] <= d.delay < SCHEDULE[step] + 0.5
        assert d.restart_at == pytest.approx(clock.now() + d.delay)


@settings(max_examples=100, deadline=None)
@given(
    st.floats(min_value=0.1, max_value=10.0),
    st.floats(min_value=1.0, max_value=100.0),
    st.floats(min_value=0.0, max_value=2.0),
    st.integers(min_value=1, max_value=30),
)
def test_backoff_respects_any_config(base: float, cap: float, jitter: float, n: int) -> None:
    cfg = RestartConfig(base=base, cap=cap, jitter=jitter, restart_limit=1000)
    tracker = RestartTracker(cfg, rand=lambda: 0.999)
    for step in range(n):
        d = tracker.record_restart(float(step))
        expected = min(base * 2**step, cap)
        assert expected <= d.delay <= expected + jitter


def test_backoff_resets_after_60_s_running() -> None:
    clock = FakeClock()
    tracker = RestartTracker(rand=lambda: 0.0)
    for want in (1.0, 2.0, 4.0):
        assert tracker.record_restart(clock.now()).delay == want
        clock.advance(want)
    # RUNNING for 59.9 s is not enough
    tracker.mark_running(clock.now())
    clock.advance(59.9)
    assert tracker.record_restart(clock.now()).delay == 8.0
    # RUNNING 60 s continuously, then UNHEALTHY, then it exits: back to 1 s
    tracker.mark_running(clock.advance(8.0))
    clock.advance(60.0)
    tracker.mark_down(clock.now())
    clock.advance(20.0)
    assert tracker.record_restart(clock.now()).delay == 1.0
    # crashing straight out of RUNNING after 60 s also resets
    tracker.mark_running(clock.advance(1.0))
    tracker.mark_running(clock.advance(30.0))  # a second call does not restart the timer
    clock.advance(30.0)
    assert tracker.running_for(clock.now()) == 60.0
    assert tracker.record_restart(clock.now()).delay == 1.0


def test_exhaustion_after_ten_restarts_in_five_minutes() -> None:
    clock = FakeClock()
    tracker = RestartTracker(rand=lambda: 0.0)
    # every exit counts: the agent reaches RUNNING and crashes after 10 s each time
    for n in range(10):
        d = decide(
            "always", Exit(code=0), stopped_by_operator=False, tracker=tracker, now=clock.now()
        )
        assert d.restart, n
        clock.advance(d.delay)
        tracker.mark_running(clock.now())
        clock.advance(10.0)
    assert clock.now() - 1_700_000_000.0 < 300
    d = decide("always", Exit(code=1), stopped_by_operator=False, tracker=tracker, now=clock.now())
    assert (d.restart, d.reason, d.exhausted) == (False, EXHAUSTED_FLAG, True)
    assert tracker.exhausted and tracker.flags == (EXHAUSTED_FLAG,)
    assert tracker.restarts == 10
    # it stays exhausted until the operator starts it
    clock.advance(1000.0)
    tracker.operator_start()
    # mypy keeps the narrowing of the assert above ((EXHAUSTED_FLAG,)) past operator_start()
    assert tracker.flags == ()  # type: ignore[comparison-overlap]
    d = tracker.record_restart(clock.now())
    assert (d.restart, d.delay) == (True, 1.0)


def test_no_exhaustion_when_restarts_are_spread_out() -> None:
    clock = FakeClock()
    tracker = RestartTracker(rand=lambda: 0.0)
    for _ in range(50):  # one every 31 s: at most 10 within any 300 s
        assert tracker.record_restart(clock.now()).restart
        assert tracker.budget_used(clock.now()) <= 10
        clock.advance(31.0)
    assert not tracker.exhausted


def test_the_window_slides() -> None:
    clock = FakeClock()
    tracker = RestartTracker(rand=lambda: 0.0)
    t0 = clock.now()
    for _ in range(10):
        assert tracker.record_restart(clock.now()).restart
        clock.advance(1.0)
    # 299 s after the first: still 10 in the window
    assert not tracker.record_restart(t0 + 299.0).restart
    tracker.exhausted = False
    # 300 s after the first, the first one has left the window
    assert tracker.record_restart(t0 + 300.0).restart


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(min_value=0.0, max_value=120.0), min_size=1, max_size=40))
def test_exhaustion_iff_ten_granted_in_the_window(gaps: list[float]) -> None:
    """Against a direct model: a restart is refused exactly when 10 were granted
    within the 300 s before it."""
    tracker = RestartTracker(rand=lambda: 0.0)
    granted: list[float] = []
    now = 0.0
    for gap in gaps:
        now += gap
        d = tracker.record_restart(now)
        in_window = [t for t in granted if t > now - 300.0]
        assert d.restart is (len(in_window) < 10)
        if d.restart:
            granted.append(now)
        else:
            tracker.operator_start()
            granted.clear()


# ---- timeouts and deadlines ---------------------------------------------------------


def test_startup_and_heartbeat_timeouts() -> None:
    clock = FakeClock()
    started = clock.now()
    assert not startup_expired(started, 30.0, clock.advance(29.999))
    assert startup_expired(started, 30.0, clock.advance(0.001))
    beat = clock.now()
    assert not heartbeat_expired(beat, 15.0, clock.advance(14.9))
    assert heartbeat_expired(beat, 15.0, clock.advance(0.1))


def test_agent_deadline_is_the_earliest_change() -> None:
    S = State
    assert agent_deadline(S.STARTING, heartbeat="pipe", started_at=100.0) == 130.0
    assert agent_deadline(S.RUNNING, heartbeat="cluster", last_beat=200.0) == 215.0
    assert agent_deadline(S.WAITING, heartbeat="pipe", last_beat=200.0) == 215.0
    assert agent_deadline(S.RUNNING, heartbeat="none", last_beat=200.0) is None
    assert agent_deadline(S.STARTING, heartbeat="none", started_at=100.0) is None
    assert agent_deadline(S.UNHEALTHY, heartbeat="pipe", restart_at=104.0) == 104.0
    assert agent_deadline(S.STOPPED, heartbeat="pipe", last_beat=1.0) is None
    assert (
        agent_deadline(
            S.RUNNING, heartbeat="pipe", last_beat=200.0, heartbeat_timeout=5, stop_deadline=203.0
        )
        == 203.0
    )
    assert next_deadline([None, 7.0, 3.0, None]) == 3.0
    assert next_deadline([None]) is None
    assert next_deadline([]) is None


def test_sleeping_until_the_deadline_sees_the_timeout_exactly() -> None:
    clock = FakeClock()
    started = clock.now()
    deadline = agent_deadline(State.STARTING, heartbeat="pipe", started_at=started)
    assert deadline is not None
    clock.set(deadline)
    assert startup_expired(started, 30.0, clock.now())


# ---- pipe heartbeat lines -----------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "beat"),
    [
        (b"HEARTBEAT 1700000000 healthy\n", Beat(1700000000.0, "healthy")),
        ("HEARTBEAT 1700000000.25 degraded", Beat(1700000000.25, "degraded")),
        (b"HEARTBEAT 1700000000 shutting-down\r\n", Beat(1700000000.0, "shutting-down")),
        (b"HEARTBEAT\t12.5\tbusy ", Beat(12.5, "busy")),
        (b"HEARTBEAT 1700000000. ok", Beat(1700000000.0, "ok")),
    ],
)
def test_parse_heartbeat(line: bytes | str, beat: Beat) -> None:
    assert parse_heartbeat(line) == beat


@pytest.mark.parametrize(
    "line",
    [
        b"",
        b"hello",
        b"HEARTBEAT",
        b"HEARTBEAT 1700000000",
        b"HEARTBEAT abc healthy",
        b"HEARTBEAT -1 healthy",
        b"HEARTBEAT 1e9 healthy",
        b"HEARTBEAT 1 healthy extra",
        b" HEARTBEAT 1 healthy",
        b"HEARTBEATS 1 healthy",
        b"HEARTBEAT 1 \xff\xfe",
        b"HEARTBEAT 1 " + b"x" * 65,
    ],
)
def test_other_lines_are_not_beats(line: bytes) -> None:
    assert parse_heartbeat(line) is None


@settings(deadline=None)
@given(
    st.one_of(st.integers(min_value=0, max_value=10**12), st.floats(0, 1e12)),
    st.text(alphabet="abcdefghijklmnopqrstuvwxyz-_", min_size=1, max_size=64),
)
def test_heartbeat_round_trip(ts: float, status: str) -> None:
    text = f"HEARTBEAT {ts!r} {status}\n" if isinstance(ts, int) else f"HEARTBEAT {ts:.6f} {status}"
    beat = parse_heartbeat(text.encode())
    assert beat is not None and beat.status == status
    assert beat.ts == pytest.approx(float(ts), abs=1e-6)


def test_a_tracker_restored_from_its_snapshot_goes_on_where_it_was() -> None:
    """What ``pids.json`` keeps (the backoff step, the restarts granted and when)
    is enough for a supervisor started again to give the next step and to exhaust
    at the same count (issue 26, defect 3: a crash reset both)."""
    clock = FakeClock()
    cfg = RestartConfig(restart_limit=4)
    first = RestartTracker(config=cfg, rand=lambda: 0.0)
    delays = []
    for _ in range(3):
        delays.append(first.record_restart(clock.now()).delay)
        clock.advance(5.0)
    saved = first.snapshot()
    second = RestartTracker(config=cfg, rand=lambda: 0.0)
    second.restore(saved)
    assert second.record_restart(clock.now()).delay == 8.0  # 1, 2, 4, then 8
    assert delays == [1.0, 2.0, 4.0]
    refused = second.record_restart(clock.advance(1.0))
    assert refused.exhausted and second.restarts == 4
    garbage = RestartTracker(config=cfg)
    garbage.restore({"attempt": "x", "recent": [1.0, "y", None], "exhausted": 1})
    assert (garbage.attempt, garbage.policy_restarts_at, garbage.exhausted) == (0, [1.0], False)


def test_an_operator_restart_is_counted_and_spends_no_budget() -> None:
    """``restarts`` counts every restart, the operator's too (what status shows);
    the crash-loop budget counts only the policy's: with ``restart_limit = 2``, any
    number of operator restarts between two crashes leaves the third crash to
    exhaust the agent, and the count survives a snapshot."""
    clock = FakeClock()
    tracker = RestartTracker(config=RestartConfig(restart_limit=2), rand=lambda: 0.0)
    assert tracker.record_restart(clock.now()).restart
    for _ in range(5):
        tracker.operator_restart()
    assert (tracker.restarts, tracker.budget_used(clock.now()), tracker.exhausted) == (6, 1, False)
    assert tracker.record_restart(clock.advance(1.0)).restart
    assert tracker.record_restart(clock.advance(1.0)).exhausted
    assert tracker.restarts == 7  # the refused one is no restart
    again = RestartTracker(config=RestartConfig(restart_limit=2))
    again.restore(tracker.snapshot())
    assert (again.restarts, again.budget_used(clock.now()), again.exhausted) == (7, 2, True)


def test_retirement_and_a_lower_bound_are_inputs_of_the_decision() -> None:
    """A pool member retired by the cluster is not restarted whatever its policy;
    a restart granted is not due before ``not_before`` (the old node declared
    dead), its delay counted to that time."""
    tracker = RestartTracker(rand=lambda: 0.0)
    d = decide(
        "always", Exit(code=1), stopped_by_operator=False, tracker=tracker, now=100.0, retired=True
    )
    assert (d.restart, d.reason) == (False, "retired") and tracker.restarts == 0
    d = decide(
        "on-failure",
        Exit(signal=9),
        stopped_by_operator=False,
        tracker=tracker,
        now=100.0,
        not_before=105.5,
    )
    assert (d.restart, d.restart_at, d.delay) == (True, 105.5, 5.5)
    d = decide(
        "on-failure",
        Exit(signal=9),
        stopped_by_operator=False,
        tracker=tracker,
        now=200.0,
        not_before=150.0,
    )
    assert (d.restart, d.restart_at) == (True, 202.0)  # the backoff is later: it stands
