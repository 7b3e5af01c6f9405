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


def test_a_task_scope_names_its_task() -> None:
    """``task:42`` and ``task:task-42`` name task 42; anything else names none (its
    sums are zero)."""
    assert b.task_id_of("task:42") == 42
    assert b.task_id_of("task:task-42") == 42
    assert b.task_id_of("task:x") is None and b.task_id_of("role:dev") is None
    assert b.task_id_of("task:" + "9" * 19) is None


_NAMES = st.sampled_from(["dev-1", "dev-2", "web-api-12", "lead", "x-"])
_ROWS = st.lists(
    st.fixed_dictionaries(
        {
            "node_id": _NAMES,
            "role": st.sampled_from(["", "developer", "architect"]),
            "model": st.sampled_from(["", "opus", "sonnet"]),
            "input_tokens": st.integers(0, 10**12),
            "output_tokens": st.integers(0, 10**12),
            "cost_micros": st.integers(0, 10**15),
            "reports": st.integers(1, 10**6),
        }
    ),
    max_size=12,
)


@given(_ROWS)
def test_the_scopes_sums_are_the_reports_summed_per_scope(rows: list[dict[str, object]]) -> None:
    """Summing the per-node rows (each carrying the node's role, model and pool) per
    scope gives what adding each row to every scope of ``scopes_of`` gives (tasks
    aside), in scope order."""
    for r in rows:
        r["pool"] = b.pool_of(str(r["node_id"]))
    want: dict[str, list[int]] = {}
    for r in rows:
        role, model = r["role"] or None, r["model"] or None
        for scope in b.scopes_of(str(r["node_id"]), role, model):  # type: ignore[arg-type]
            acc = want.setdefault(scope, [0, 0, 0, 0])
            for i, k in enumerate(("input_tokens", "output_tokens", "cost_micros", "reports")):
                acc[i] += int(r[k])  # type: ignore[call-overload]
    got = b.scope_sums(rows)
    assert list(got) == sorted(want)
    assert got == {k: tuple(v) for k, v in want.items()}
