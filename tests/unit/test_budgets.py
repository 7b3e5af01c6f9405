"""The pure rules of usage, budgets and per-model caps (corral.budgets): windows on
an injected clock, the scopes a report counts for, the budget thresholds, the
settings' checks."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from corral import budgets as b
from corral.errors import InvalidInputError

T0 = 1_700_000_000.0  # 2023-11-14 22:13:20 UTC


@given(st.floats(min_value=0, max_value=4e9), st.sampled_from(sorted(b.WINDOWS)))
def test_a_window_holds_now_and_is_its_length(now: float, window: str) -> None:
    start, end = b.window_bounds(window, now)
    assert start <= now < end
    assert end - start == b.WINDOWS[window]
    assert b.window_bounds(window, end) == (end, end + b.WINDOWS[window])  # it rolls over


def test_the_windows_are_aligned_to_utc() -> None:
    assert b.window_bounds("1h", T0) == (1_699_999_200.0, 1_700_002_800.0)
    assert b.window_bounds("1d", T0) == (1_699_920_000.0, 1_700_006_400.0)
    assert b.window_bounds("5h", T0)[0] % (5 * 3600) == 0
    assert b.bucket_start(T0) == 1_699_999_200.0


@given(st.floats(min_value=0, max_value=4e9), st.sampled_from(sorted(b.WINDOWS)))
def test_every_hour_bucket_lies_in_one_window(now: float, window: str) -> None:
    """A window is a whole number of hours: the bucket of ``now`` is inside it, so
    the sum of a window's buckets is the window's usage."""
    start, end = b.window_bounds(window, now)
    assert start <= b.bucket_start(now) < end


def test_the_scopes_of_a_report() -> None:
    assert b.scopes_of("dev-3", "developer", "opus", 7) == [
        "cluster",
        "node:dev-3",
        "role:developer",
        "model:opus",
        "pool:dev",
        "task:7",
    ]
    assert b.scopes_of("lead", "architect", None) == ["cluster", "node:lead", "role:architect"]
    assert b.pool_of("web-api-12") == "web-api"
    assert b.pool_of("lead") is None


def test_a_budget_is_spent_by_either_limit() -> None:
    both = b.Budget("cluster", "1d", tokens=1000, cost_usd=2.0)
    assert b.fraction_used(both, 500, 0) == 0.5
    assert b.fraction_used(both, 0, 2 * b.MICROS) == 1.0
    assert b.fraction_used(b.Budget("cluster", "1d", tokens=10), 0, 10**9) == 0.0
    assert both.name == "cluster budget of 1000 tokens and $2 per 1d"


@pytest.mark.parametrize(
    ("before", "after", "crossed"),
    [
        (0.0, 0.5, []),
        (0.5, 0.8, [0.8]),
        (0.79, 1.2, [0.8, 1.0]),
        (0.8, 0.99, []),
        (0.9, 1.0, [1.0]),
    ],
)
def test_the_thresholds_a_report_crosses(before: float, after: float, crossed: list[float]) -> None:
    assert b.crossed(before, after) == crossed


def test_the_model_cap_rule() -> None:
    caps = {"opus": 2, "none": 0}
    assert not b.model_cap_reached("opus", 1, caps)
    assert b.model_cap_reached("opus", 2, caps)
    assert b.model_cap_reached("none", 0, caps)
    assert not b.model_cap_reached("sonnet", 100, caps)
    assert not b.model_cap_reached(None, 100, caps)


def test_budgets_are_checked_and_normalized() -> None:
    assert b.check_budgets([{"scope": "pool:dev", "window": "5h", "cost_usd": 3}]) == [
        {"scope": "pool:dev", "window": "5h", "cost_usd": 3.0, "hard": False}
    ]
    for bad, message in [
        ("x", "must be a list"),
        ([{"scope": "pool:", "window": "1h", "tokens": 1}], "scope must be cluster"),
        ([{"scope": "cluster", "window": "1w", "tokens": 1}], "window must be one of"),
        ([{"scope": "cluster", "window": "1h", "tokens": True}], "tokens must be"),
        ([{"scope": "cluster", "window": "1h", "cost_usd": float("inf")}], "cost_usd must be"),
        ([{"scope": "cluster", "window": "1h", "tokens": 1, "hard": "yes"}], "hard must be"),
    ]:
        with pytest.raises(InvalidInputError, match=message):
            b.check_budgets(bad)


def test_the_refusal_names_the_budget_and_when_it_frees() -> None:
    text = b.budget_text(b.Budget("role:developer", "1h", tokens=100), 1.05, 1_700_002_800.0)
    assert text.startswith("role:developer budget of 100 tokens per 1h is spent (105% used)")
    assert "frees at 1700002800" in text


def test_a_budget_event_is_an_alert() -> None:
    """``budget_warning`` and ``budget_spent`` events are the ``budget`` alert, one
    subject per budget (corral.alerts)."""
    from corral.alerts import from_event
    from corral.model import Event

    data = {"budget": "cluster budget of $5 per 1d", "used": 1.0, "frees_at": 1_700_006_400.0}
    [alert] = from_event(Event(seq=9, ts=T0, kind="budget_spent", node_id="dev-1", data=data))
    assert (alert.condition, alert.subject) == ("budget", "budget:cluster budget of $5 per 1d")
    assert "is spent (100% used" in alert.message
    warning = Event(seq=8, ts=T0, kind="budget_warning", data={**data, "used": 0.8})
    assert "at 80%" in from_event(warning)[0].message


def test_a_windows_hours_and_the_stored_keys() -> None:
    """A window's sums are read hour by hour; a task's scope is stored so that its
    hour's task rows sort in id order before the other scopes."""
    start, end = b.window_bounds("5h", T0)
    assert b.hours(start, end) == [start + i * 3600 for i in range(5)]
    assert b.hours(start, start) == []
    assert b.scope_key("task:42") == "#000000000000000042"
    assert b.scope_key("task:task-42") == "#000000000000000042"
    assert b.scope_key("task:x") == "task:x" and b.scope_key("role:dev") == "role:dev"
    assert sorted([b.scope_key("task:10"), b.scope_key("task:9"), "cluster"]) == [
        b.scope_key("task:9"),
        b.scope_key("task:10"),
        "cluster",
    ]
