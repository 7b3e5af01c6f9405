"""``corral.outage``: the retry through an unreachable store, with an injected clock.

The daemons riding out a real ``corral serve`` kill and real PostgreSQL session kills
are ``tests/integration/test_worker_outage.py``."""

from __future__ import annotations

import logging
from typing import Any, cast

import pytest
from hypothesis import given
from hypothesis import strategies as st

import corral
from corral.errors import InvalidInputError, LeaseError, StoreUnavailableError
from corral.model import Task
from corral.outage import (
    MAX_OUTAGE_TOLERANCE,
    OUTAGE_TOLERANCE,
    CallLost,
    OutagePolicy,
    Tolerant,
    check_tolerance,
)
from corral.store.claimkeys import CLAIM_KEY_SECONDS


class FakeTime:
    """A monotonic clock that only the retries' sleeps move."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> bool:
        self.sleeps.append(seconds)
        self.now += seconds
        return False


class Flaky:
    """A client whose calls fail with ``errors`` (in turn) before they succeed."""

    def __init__(self, *errors: Exception) -> None:
        self.errors = list(errors)
        self.calls: list[tuple[str, Any, str | None]] = []
        self.key: str | None = None

    def _answer(self, name: str, value: Any) -> Any:
        self.calls.append((name, value, self.key))
        if self.errors:
            raise self.errors.pop(0)
        return value

    def claim_best_task(self, node_id: str, role: str, *, wait: float = 0) -> Any:
        return self._answer("claim_best_task", "task")

    def add_task(self, title: str) -> Any:
        return self._answer("add_task", title)

    def heartbeat(self, node_id: str, **payload: Any) -> Any:
        return self._answer("heartbeat", node_id)

    def complete_task(self, task_id: int, node_id: str, epoch: int | None = None) -> Any:
        return self._answer("complete_task", task_id)

    def get_task(self, task_id: int) -> Any:
        self.calls.append(("get_task", task_id, None))
        return self.task

    task: Any = None

    def keyed(self, key: str) -> Any:
        from contextlib import contextmanager

        @contextmanager
        def block() -> Any:
            self.key = key
            try:
                yield
            finally:
                self.key = None

        return block()


def _tolerant(client: Any, t: FakeTime, tolerance: float = 10.0) -> Any:
    return Tolerant(client, tolerance, sleep=t.sleep, monotonic=t.monotonic, rand=lambda: 0.0)


def test_the_default_window_is_a_minute_and_keys_outlive_any_window() -> None:
    assert OUTAGE_TOLERANCE == 60.0
    assert MAX_OUTAGE_TOLERANCE == CLAIM_KEY_SECONDS


def test_waits_double_from_a_tenth_of_a_second_up_to_five_and_stop_at_the_window() -> None:
    p = OutagePolicy(tolerance=12.0, jitter=0.0)
    assert [p.wait(a, 0.0) for a in range(8)] == [0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0]
    assert p.wait(6, 10.0) == 2.0  # the last retry falls at the window's end
    assert p.wait(6, 12.0) is None
    assert p.wait(0, 13.0) is None


@given(
    attempt=st.integers(0, 200),
    failing=st.floats(0, 100, allow_nan=False),
    r=st.floats(0, 1, exclude_max=True),
)
def test_a_wait_is_jittered_within_half_and_never_passes_the_window(
    attempt: int, failing: float, r: float
) -> None:
    p = OutagePolicy(tolerance=60.0)
    got = p.wait(attempt, failing, lambda: r)
    if failing >= 60.0:
        assert got is None
        return
    full = min(0.1 * 2.0**attempt, 5.0) if attempt < 10 else 5.0
    assert got is not None
    assert 0 < got <= min(full, 60.0 - failing) + 1e-12
    assert got >= min(full * 0.5, 60.0 - failing) - 1e-12


@pytest.mark.parametrize("bad", [-1, 600.5, float("nan"), "60", True, None])
def test_a_bad_tolerance_is_refused_naming_it(bad: Any) -> None:
    with pytest.raises(InvalidInputError) as err:
        check_tolerance(bad)
    assert err.value.field == "outage_tolerance"


def test_a_call_is_retried_through_an_outage_and_answers_when_the_store_is_back() -> None:
    t = FakeTime()
    flaky = Flaky(*[StoreUnavailableError("down")] * 5)
    c = _tolerant(flaky, t)
    assert c.add_task("x") == "x"
    assert len(flaky.calls) == 6
    assert t.sleeps == [0.1, 0.2, 0.4, 0.8, 1.6]
    assert (c.outages, c.retries) == (1, 5)


def test_the_last_error_is_raised_once_the_window_is_spent() -> None:
    t = FakeTime()
    flaky = Flaky(*[StoreUnavailableError("down")] * 100)
    c = _tolerant(flaky, t, tolerance=10.0)
    with pytest.raises(StoreUnavailableError):
        c.add_task("x")
    assert t.now == pytest.approx(10.0)  # no wait passes the window
    assert max(t.sleeps) <= 5.0


def test_a_zero_window_raises_at_once() -> None:
    t = FakeTime()
    c = _tolerant(Flaky(StoreUnavailableError("down")), t, tolerance=0)
    with pytest.raises(StoreUnavailableError):
        c.add_task("x")
    assert t.sleeps == []


def test_a_lost_answer_is_not_sent_again_for_a_call_that_would_act_twice() -> None:
    t = FakeTime()
    flaky = Flaky(CallLost("no answer"))
    with pytest.raises(CallLost):
        _tolerant(flaky, t).add_task("x")
    assert len(flaky.calls) == 1


def test_heartbeats_are_not_retried_their_destinations_count_failures() -> None:
    t = FakeTime()
    flaky = Flaky(StoreUnavailableError("down"))
    with pytest.raises(StoreUnavailableError):
        _tolerant(flaky, t).heartbeat("w1")
    assert len(flaky.calls) == 1


def test_a_claim_sent_again_carries_the_same_key_and_each_claim_its_own() -> None:
    t = FakeTime()
    flaky = Flaky(CallLost("no answer"), StoreUnavailableError("down"))
    c = _tolerant(flaky, t)
    assert c.claim_best_task("w1", "developer") == "task"
    keys = {key for _, _, key in flaky.calls}
    assert len(flaky.calls) == 3 and len(keys) == 1 and None not in keys
    c.claim_best_task("w1", "developer")
    assert flaky.calls[-1][2] not in keys


def test_a_completion_refused_after_its_lost_answer_is_the_done_task_if_it_did_complete() -> None:
    t = FakeTime()
    flaky = Flaky(CallLost("no answer"), LeaseError("task 3 is done"))
    flaky.task = Task(id=3, title="t", priority="medium", status="done", assigned_to="w1", epoch=2)
    assert _tolerant(flaky, t).complete_task(3, "w1", 2) is flaky.task
    flaky = Flaky(CallLost("no answer"), LeaseError("task 3 is done"))
    flaky.task = Task(
        id=3, title="t", priority="medium", status="in_progress", assigned_to="w2", epoch=3
    )
    with pytest.raises(LeaseError):  # someone else's now: fenced
        _tolerant(flaky, t).complete_task(3, "w1", 2)
    flaky = Flaky(LeaseError("not held"))
    with pytest.raises(LeaseError):  # refused without a lost answer: no second look
        _tolerant(flaky, t).complete_task(3, "w1", 2)
    assert [n for n, _, _ in flaky.calls] == ["complete_task"]


def test_a_stop_ends_the_wait_with_the_error() -> None:
    flaky = Flaky(*[StoreUnavailableError("down")] * 3)
    c = Tolerant(flaky, 60, sleep=lambda s: True)
    with pytest.raises(StoreUnavailableError):
        c.add_task("x")
    assert len(flaky.calls) == 1


def test_a_keyed_claim_sent_again_gets_the_same_task_on_every_store(tmp_path: Any) -> None:
    """The store's half (SQLite here; PostgreSQL and HTTP in test_worker_outage)."""
    c = corral.connect(f"sqlite:///{tmp_path / 'c.db'}")
    assert isinstance(c, corral.Cluster)  # a database URL gives the embedded client
    c.register_node("w1", "developer")
    for i in range(3):
        c.add_task(f"t{i}")
    store: Any = c.store
    now = 1.0e9
    first = store.claim("w1", "developer", now, key="k1")
    assert store.claim("w1", "developer", now, key="k1") == first
    done, nxt = store.complete_and_claim(
        first.id, "w1", first.epoch, None, "developer", now, key="k2"
    )
    again = store.complete_and_claim(first.id, "w1", first.epoch, None, "developer", now, key="k2")
    assert again == (done, nxt)
    held = c.list_tasks(status="in_progress", assigned_to="w1")
    assert [t.id for t in held] == [nxt.id]
    c.close()


class DownCluster:
    """A cluster client that is unreachable until ``down`` is cleared."""

    def __init__(self) -> None:
        self.down = True
        self.beats = 0
        self.alerts: list[dict[str, Any]] = []

    def heartbeat(self, node_id: str, **payload: Any) -> None:
        if self.down:
            raise StoreUnavailableError("cannot reach the server")
        self.beats += 1

    def alert(self, message: str, node_id: str | None = None, **data: Any) -> None:
        if self.down:
            raise StoreUnavailableError("cannot reach the server")
        self.alerts.append(data)


def test_the_alert_after_3_failed_beats_fires_and_reaches_the_cluster_once_it_is_back(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """heartbeat-protocol.md's graceful degradation: the beats fail, the third in a
    row alerts (the log line at once; the cluster's alert event once a beat reaches
    it again, since the cluster is what failed), and the worker goes on."""
    from corral.worker.destinations import RetryPolicy
    from corral.worker.heartbeat import HeartbeatMonitor

    cluster = DownCluster()
    hb = HeartbeatMonitor(
        "w1",
        cast(Any, cluster),
        retry=RetryPolicy(retry_attempts=1, retry_delay=0),
        sleep=lambda s: None,
    )
    caplog.set_level(logging.INFO, logger="corral")
    for _ in range(4):
        hb.beat()
    actions = [getattr(r, "action", None) for r in caplog.records]
    assert actions.count("heartbeat_alert") == 1
    assert cluster.alerts == []
    cluster.down = False
    hb.beat()
    hb.beat()
    assert cluster.beats == 2
    assert [(a["destination"], a["consecutive_failures"]) for a in cluster.alerts] == [
        ("cluster", 3)
    ]


def test_the_cluster_destination_fits_its_tries_within_one_beat() -> None:
    """Its beats keep the leases: a beat failed in an outage is tried again within
    the beat, not ``retry_delay`` (5 s) later, past a short-beating node's window."""
    from corral.worker.destinations import RetryPolicy
    from corral.worker.heartbeat import HeartbeatMonitor, cluster_policy

    default = RetryPolicy()
    assert cluster_policy(default, 1.5) == RetryPolicy(retry_attempts=3, retry_delay=0.5)
    assert cluster_policy(default, 30.0) is default  # 5 s apart already fits
    assert cluster_policy(RetryPolicy(retry_attempts=1, retry_delay=9), 2.0).retry_delay == 2.0
    hb = HeartbeatMonitor(
        "w1",
        cast(Any, DownCluster()),
        heartbeat_interval=1.5,
        destinations=[_Named("cluster"), _Named("webhook")],
    )
    assert [d.policy.retry_delay for d in hb.deliveries] == [0.5, 5.0]


class _Named:
    def __init__(self, name: str) -> None:
        self.name = name

    def send(self, payload: Any) -> None:
        pass
