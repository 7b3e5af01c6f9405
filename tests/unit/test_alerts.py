"""The alert rules (``corral.alerts``): the rate limit per subject, the crash loop's
window, the thresholds, the events that are alerts, and the alert settings' checks
(cluster settings and a fleet manifest's ``[alerts]``). Times are injected."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from corral import alerts
from corral.alerts import AlertConfig, RateLimit
from corral.config import check_changes
from corral.errors import InvalidInputError
from corral.fleet.manifest import parse_fleet
from corral.model import Event, Settings
from corral.supervisor.manifest import ManifestError


def _event(kind: str, node: str | None = None, task: int | None = None, **data: Any) -> Event:
    return Event(seq=7, ts=100.0, kind=kind, node_id=node, task_id=task, data=data)


# --- the rate limit ---------------------------------------------------------------------
def test_a_subject_is_admitted_once_per_window() -> None:
    assert alerts.admit(None, 0.0, 60.0)
    assert not alerts.admit(100.0, 159.9, 60.0)
    assert alerts.admit(100.0, 160.0, 60.0)


def test_the_rate_limit_counts_per_subject_and_says_what_it_held_back() -> None:
    limit = RateLimit()
    assert limit.take("task:1", 0.0, 60.0) == 0
    assert limit.take("task:2", 1.0, 60.0) == 0  # another subject: its own window
    assert limit.take("task:1", 30.0, 60.0) is None
    assert limit.take("task:1", 59.0, 60.0) is None
    assert limit.take("task:1", 60.0, 60.0) == 2  # the two held back since
    assert limit.take("task:1", 61.0, 60.0) is None


@given(
    st.lists(
        st.tuples(st.sampled_from(["a", "b", "c"]), st.floats(0, 1000, allow_nan=False)),
        max_size=60,
    ),
    st.floats(0.5, 300, allow_nan=False),
)
def test_the_rate_limit_sends_once_per_window_and_counts_the_rest(
    attempts: list[tuple[str, float]], window: float
) -> None:
    """Whatever the order of subjects and times: a subject's POSTs are at least a
    window apart, an alert held back came within the window of its subject's last
    POST, and every attempt is either sent or counted in the next POST's held_back."""
    limit = RateLimit()
    sent: dict[str, list[float]] = {}
    held_since: dict[str, int] = {}
    reported = 0
    for subject, now in sorted(attempts, key=lambda a: a[1]):
        held = limit.take(subject, now, window)
        if held is None:
            assert now - sent[subject][-1] < window
            held_since[subject] = held_since.get(subject, 0) + 1
        else:
            assert held == held_since.pop(subject, 0)
            reported += held
            sent.setdefault(subject, []).append(now)
    for times in sent.values():
        assert all(b - a >= window for a, b in itertools.pairwise(times))
    total_sent = sum(len(t) for t in sent.values())
    assert total_sent + reported + sum(held_since.values()) == len(attempts)


def test_an_alert_seen_in_the_events_counts_for_the_rate_limit() -> None:
    """A standby that took the lead knows what the old leader alerted."""
    limit = RateLimit()
    limit.note("node:w1", 100.0)
    limit.note("node:w1", 50.0)  # an older one changes nothing
    assert limit.take("node:w1", 120.0, 60.0) is None
    assert limit.take("node:w1", 160.0, 60.0) == 1


def test_subjects_past_their_window_are_forgotten() -> None:
    limit = RateLimit()
    limit.take("a", 0.0, 10.0)
    limit.take("b", 50.0, 10.0)
    limit.forget_before(40.0)
    assert set(limit.last) == {"b"}


# --- the crash loop -----------------------------------------------------------------
def test_restarts_are_counted_within_the_window_only() -> None:
    samples = [(0.0, 0), (10.0, 2), (50.0, 3), (90.0, 6)]
    assert alerts.restarts_within(samples, 90.0, 100.0) == 6
    assert alerts.restarts_within(samples, 90.0, 50.0) == 4  # the rises at 50 and 90
    assert alerts.restarts_within(samples, 90.0, 30.0) == 3
    assert alerts.restarts_within(samples, 200.0, 30.0) == 0  # all of them too old


def test_a_restart_count_that_drops_adds_nothing() -> None:
    """An agent started afresh (its count back to 0) has not restarted."""
    assert alerts.restarts_within([(0.0, 5), (1.0, 0), (2.0, 1)], 2.0, 10.0) == 1


def test_a_crash_loop_is_n_restarts_in_the_window() -> None:
    samples = [(0.0, 0), (100.0, 4)]
    assert not alerts.crash_loop(samples, 100.0, 600.0, 5)
    samples.append((200.0, 5))
    assert alerts.crash_loop(samples, 200.0, 600.0, 5)
    assert not alerts.crash_loop(samples, 700.0, 600.0, 5)  # the rise at 100 left it


# --- the thresholds -------------------------------------------------------------------
def test_a_spawn_request_is_overdue_past_the_threshold_oldest_first() -> None:
    pending = {3: 500.0, 1: 100.0, 2: 950.0}
    assert alerts.spawn_overdue(pending, 1000.0, 400.0) == [1, 3]
    assert alerts.spawn_overdue(pending, 1000.0, 899.0) == [1]
    assert alerts.spawn_overdue(pending, 1000.0, 900.0) == []  # 900 s is not longer
    assert alerts.spawn_overdue(pending, 600.0, 500.0) == []  # 500 s is not longer


def test_a_workflow_run_is_past_its_earliest_waiter_deadline() -> None:
    waiters: list[dict[str, Any]] = [{"deadline": 300.0}, {"deadline": 200.0}, {"deadline": None}]
    assert alerts.past_deadline(waiters, 199.0) is None
    assert alerts.past_deadline(waiters, 201.0) == 200.0
    assert alerts.past_deadline([{"deadline": None}], 1e9) is None
    assert alerts.past_deadline([], 1e9) is None


# --- events ---------------------------------------------------------------------------
def test_a_recovered_lease_is_an_alert_about_the_dead_node() -> None:
    (alert,) = alerts.from_event(_event("lease_recovered", "w1", 4, outcome="pending"))
    assert (alert.condition, alert.subject, alert.node_id) == (
        "node_dead_with_lease",
        "node:w1",
        "w1",
    )
    assert alert.data["task_id"] == 4


def test_a_task_failed_for_good_is_an_alert_about_the_task() -> None:
    (final,) = alerts.from_event(
        _event("task_failed", "w1", 9, outcome="failed", error_text="boom")
    )
    assert (final.condition, final.subject) == ("task_failed", "task:9")
    assert "boom" in final.message
    # a failure that goes back to the queue is not one
    assert alerts.from_event(_event("task_failed", "w1", 9, outcome="pending")) == []


def test_a_lease_recovered_from_a_tasks_last_attempt_is_two_alerts() -> None:
    """The node died holding it, and the task failed for good."""
    found = alerts.from_event(_event("lease_recovered", "w1", 4, outcome="failed", reason="dead"))
    assert [(a.condition, a.subject) for a in found] == [
        ("node_dead_with_lease", "node:w1"),
        ("task_failed", "task:4"),
    ]


def test_an_alerts_error_text_is_one_bounded_printable_line() -> None:
    """A worker's error text reaches webhooks and ``corral up``'s terminal: no newline
    or escape sequence, at most 200 characters."""
    (alert,) = alerts.from_event(
        _event("task_failed", "w1", 9, outcome="failed", error_text="\x1b[31mboom\n" + "x" * 500)
    )
    assert alert.data["error"].startswith("[31mboom xxx") and len(alert.data["error"]) == 200
    assert "\n" not in alert.message and "\x1b" not in alert.message


def test_other_events_are_not_alerts() -> None:
    for e in (
        _event("task_claimed", "w1", 1),
        _event("alert", None, 3, outcome="failed", subject="task:3"),  # never itself
        _event("node_dead", "w1"),
    ):
        assert alerts.from_event(e) == []


# --- the settings -----------------------------------------------------------------------
def test_the_alert_config_is_the_settings_alert_fields() -> None:
    s = Settings(alert_webhooks=["http://h/x"], alert_rate_limit_seconds=9.0)
    c = AlertConfig.from_settings(s)
    assert c.webhooks == ("http://h/x",) and c.rate_limit_seconds == 9.0
    assert AlertConfig.from_settings(Settings()) == AlertConfig()
    assert set(alerts.MANIFEST_KEYS.values()) == {
        n for n in Settings.__dataclass_fields__ if n.startswith("alert_")
    }


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"alert_webhooks": ["ftp://h/x"]}, "alert_webhooks"),
        ({"alert_webhooks": ["http://"]}, "alert_webhooks"),
        ({"alert_webhooks": ["http://h/x\n"]}, "alert_webhooks"),
        ({"alert_webhooks": "http://h/x"}, "alert_webhooks"),
        ({"alert_webhooks": ["http://h"] * 11}, "alert_webhooks"),
        ({"alert_crash_loop_window": -1}, "alert_crash_loop_window"),
        ({"alert_rate_limit_seconds": 0}, "alert_rate_limit_seconds"),
        ({"alert_crash_loop_restarts": 1.5}, "alert_crash_loop_restarts"),
        ({"alert_color": "red"}, "alert_color"),
    ],
)
def test_bad_alert_settings_are_refused_naming_the_field(
    changes: dict[str, Any], field: str
) -> None:
    with pytest.raises(InvalidInputError) as caught:
        check_changes(changes)
    assert caught.value.field == field
    assert field in str(caught.value)


def test_good_webhooks_are_taken_as_given() -> None:
    urls = ["http://127.0.0.1:9000/hook", "https://hooks.example.com/a?b=c"]
    assert check_changes({"alert_webhooks": urls}) == {"alert_webhooks": urls}


_FLEET: dict[str, Any] = {"agents": [{"id": "a", "cmd": "true"}]}


def test_a_manifest_alerts_table_becomes_the_alert_settings() -> None:
    fleet = parse_fleet(
        {**_FLEET, "alerts": {"webhooks": ["http://h/x"], "crash_loop_restarts": 3}},
        path="fleet.toml",
    )
    assert dict(fleet.cluster_settings) == {
        "alert_webhooks": ["http://h/x"],
        "alert_crash_loop_restarts": 3,
    }


@pytest.mark.parametrize(
    ("table", "message"),
    [
        (
            {"webhooks": ["not a url"]},
            "fleet.toml: alerts.webhooks: must hold http:// or https:// URLs with a host;"
            " got 'not a url'",
        ),
        ({"crash_loop_window": -5}, "fleet.toml: alerts.crash_loop_window: must be a positive"),
        ({"colour": 1}, "fleet.toml: alerts.colour: unknown key (expected crash_loop_restarts"),
    ],
)
def test_a_bad_manifest_alerts_table_names_the_file_and_field(
    table: dict[str, Any], message: str
) -> None:
    with pytest.raises(ManifestError) as caught:
        parse_fleet({**_FLEET, "alerts": table}, path="fleet.toml")
    assert str(caught.value).startswith(message)
    assert caught.value.exit_code == 2


def test_an_alert_setting_given_twice_in_a_manifest_is_refused() -> None:
    with pytest.raises(ManifestError, match="given twice"):
        parse_fleet(
            {
                **_FLEET,
                "alerts": {"retry_attempts": 2},
                "cluster": {"settings": {"alert_retry_attempts": 3}},
            },
            path="fleet.toml",
        )
