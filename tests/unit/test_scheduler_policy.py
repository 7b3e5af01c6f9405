"""The assignment order (corral.scheduler.policy) and the cron wrapper, as pure
functions: hypothesis against a plain restatement of the rules."""

from __future__ import annotations

from datetime import UTC, datetime, tzinfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corral.errors import InvalidInputError
from corral.scheduler import cron
from corral.scheduler.agentconfig import check_config
from corral.scheduler.policy import (
    Candidate,
    Counts,
    allowance,
    day_of,
    next_due,
    pick,
    rested,
    tally,
)

NOW = 1_000_000.0
times = st.one_of(st.none(), st.sampled_from([NOW - 7200, NOW - 3600, NOW - 600, NOW - 60, NOW]))
candidates = st.builds(
    Candidate,
    id=st.sampled_from(list("abcdefgh")),
    unread=st.sampled_from([0, 0, 1, 2, 3]),
    last_activated_at=times,
    held=st.booleans(),
    min_interval=st.one_of(st.none(), st.sampled_from([0.0, 300.0, 3600.0])),
    next_due_at=st.one_of(st.none(), st.sampled_from([NOW - 60, NOW, NOW + 60])),
)
pools = st.lists(candidates, max_size=12, unique_by=lambda c: c.id)
modes = st.sampled_from(["notification", "exploration", "hybrid"])


def _restated(
    agents: list[Candidate], mode: str, now: float, interval: float
) -> tuple[str, str] | None:
    """The rules as written in the document, one sort per class."""
    free = [a for a in agents if not a.held]

    def last(a: Candidate) -> float:  # NULLS FIRST
        return float("-inf") if a.last_activated_at is None else a.last_activated_at

    if mode in ("notification", "hybrid"):
        inbox = sorted((a for a in free if a.unread), key=lambda a: (-a.unread, last(a), a.id))
        if inbox:
            return inbox[0].id, "inbox"
    if mode == "notification":
        return None
    due = sorted(
        (a for a in free if a.next_due_at is not None and a.next_due_at <= now),
        key=lambda a: (a.next_due_at, a.id),
    )
    if due:
        return due[0].id, "scheduled"
    ok = []
    for a in free:
        iv = interval if a.min_interval is None else a.min_interval
        if a.unread == 0 and (
            a.last_activated_at is None or iv <= 0 or now - a.last_activated_at >= iv
        ):
            ok.append(a)
    ok.sort(key=lambda a: (last(a), a.id))
    return (ok[0].id, "discovery") if ok else None


@settings(max_examples=400)
@given(pools, modes, st.sampled_from([0.0, 600.0, 3600.0]))
def test_pick_is_the_documented_order(agents: list[Candidate], mode: str, interval: float) -> None:
    got = pick(agents, mode, NOW, interval)
    want = _restated(agents, mode, NOW, interval)
    assert (None if got is None else (got.agent_id, got.kind)) == want


@given(pools, st.sampled_from([0.0, 600.0]))
def test_modes_keep_to_their_kinds(agents: list[Candidate], interval: float) -> None:
    n = pick(agents, "notification", NOW, interval)
    e = pick(agents, "exploration", NOW, interval)
    assert n is None or n.kind == "inbox"
    assert e is None or e.kind in ("scheduled", "discovery")
    for p in (n, e, pick(agents, "hybrid", NOW, interval)):
        assert p is None or not next(a for a in agents if a.id == p.agent_id).held


def test_never_activated_comes_first_and_inbox_jumps_the_queue() -> None:
    agents = [
        Candidate("old", last_activated_at=NOW - 9000),
        Candidate("never"),
        Candidate("busy", unread=1, last_activated_at=NOW),
    ]
    explored, hybrid = pick(agents, "exploration", NOW), pick(agents, "hybrid", NOW)
    assert explored is not None and explored.agent_id == "never"
    assert hybrid is not None and hybrid.agent_id == "busy"
    assert hybrid.kind == "inbox"


def test_min_interval_is_off_unless_set() -> None:
    a = Candidate("a", last_activated_at=NOW - 1)
    assert rested(a, NOW, 0.0)
    assert not rested(a, NOW, 900.0)
    assert rested(Candidate("a", last_activated_at=NOW - 1, min_interval=0.0), NOW, 900.0)


@given(st.integers(0, 10), st.integers(0, 60), st.integers(0, 3), st.integers(0, 3))
def test_caps_count_per_day(posts_cap: int, comments_cap: int, posts: int, comments: int) -> None:
    config = {"max_daily_posts": posts_cap, "max_daily_comments": comments_cap}
    counts = tally(Counts(), posts, comments, NOW)
    left = allowance(config, counts, NOW)
    assert left.posts == max(0, posts_cap - posts)
    assert left.comments == max(0, comments_cap - comments)
    tomorrow = (day_of(NOW) + 1) * 86_400.0
    assert allowance(config, counts, tomorrow).posts == posts_cap


def test_caps_stop_a_sixth_post_and_no_posts_when_not_allowed() -> None:
    counts = Counts()
    for _ in range(5):
        posts = allowance({"max_daily_posts": 5}, counts, NOW).posts
        assert posts is not None and posts > 0
        counts = tally(counts, 1, 0, NOW)
    assert allowance({"max_daily_posts": 5}, counts, NOW).posts == 0
    assert allowance({"can_create_posts": False}, Counts(), NOW).posts == 0
    assert allowance({}, Counts(), NOW).posts is None


# --- cron --------------------------------------------------------------------------------
def _ts(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, *, tz: tzinfo = UTC
) -> float:
    return datetime(year, month, day, hour, minute, tzinfo=tz).timestamp()


@pytest.mark.parametrize(("alias", "fields"), sorted(cron.ALIASES.items()))
def test_aliases_fire_as_their_fields(alias: str, fields: str) -> None:
    start = _ts(2026, 3, 14, 15, 9)
    assert cron.next_fire(alias, start) == cron.next_fire(fields, start)


def test_next_fire_is_strictly_after() -> None:
    nine = _ts(2026, 1, 1, 9)
    assert cron.next_fire("0 9 * * *", nine - 1) == nine
    assert cron.next_fire("0 9 * * *", nine) == nine + 86_400


def test_a_fall_back_hour_fires_once() -> None:
    from zoneinfo import ZoneInfo

    ny = ZoneInfo("America/New_York")
    start = _ts(2026, 11, 1, 0, 0, tz=ny)
    first = cron.next_fire("30 1 * * *", start, "America/New_York")
    second = cron.next_fire("30 1 * * *", first, "America/New_York")
    assert second - first > 23 * 3600  # the repeated 01:30 is not a second fire


@pytest.mark.parametrize("bad", ["", "61 9 * * *", "@sometimes", "* * *", 5])
def test_bad_cron_is_refused_naming_the_field(bad: str | int) -> None:
    with pytest.raises(InvalidInputError) as e:
        cron.check_cron(bad, "schedule_override[0].cron")
    assert e.value.field == "schedule_override[0].cron"


def test_next_due_is_the_earliest_entry() -> None:
    config = check_config(
        {
            "schedule_override": [
                {"cron": "0 9 * * *", "task": "daily_standup"},
                {"cron": "@hourly", "task": "hourly_check"},
            ]
        }
    )
    at = _ts(2026, 1, 1, 8, 30)
    assert next_due(config, at) == (_ts(2026, 1, 1, 9), "daily_standup")
    assert next_due({}, at) is None


@pytest.mark.parametrize(
    ("config", "field"),
    [
        ({"max_daily_posts": -1}, "max_daily_posts"),
        ({"interests": "rust"}, "interests"),
        ({"discovery": {"min_confidence": 2}}, "discovery.min_confidence"),
        ({"schedule_override": [{"cron": "nope"}]}, "schedule_override[0].cron"),
        ({"schedule_override": [{"task": "x"}]}, "schedule_override[0].cron"),
        ({"max_daily_post": 5}, "config"),
        ({"can_create_posts": "yes"}, "can_create_posts"),
        ("x", "config"),
    ],
)
def test_bad_config_names_the_field(config: object, field: str) -> None:
    with pytest.raises(InvalidInputError) as e:
        check_config(config)
    assert e.value.field == field


def test_the_documents_config_is_accepted() -> None:
    doc = {
        "name": "claude-code-1",
        "type": "claude",
        "model": "claude-sonnet-4-20250514",
        "interests": ["rust", "debugging", "kubernetes"],
        "watch_communities": ["m/debugging", "m/devops"],
        "can_create_posts": True,
        "max_daily_posts": 5,
        "max_daily_comments": 50,
        "discovery": {
            "respond_to_questions": True,
            "respond_to_discussions": False,
            "min_confidence": 0.7,
        },
        "schedule_override": [{"cron": "0 9 * * *", "task": "daily_standup"}],
    }
    out = check_config(doc)
    assert out["schedule_override"] == [{"cron": "0 9 * * *", "task": "daily_standup", "tz": "UTC"}]
    assert out["discovery"]["min_confidence"] == 0.7
