"""Usage and spend, budgets and per-model caps (docs/guardrails.md) on every backend.

``complete_task``, ``complete_and_claim``, ``fail_task``, ``report_progress`` and
``heartbeat`` take ``usage`` deltas; ``usage(scope, window)`` reads the sums of the
window holding now. A spent budget refuses claims by the nodes in its scope with
``BudgetError`` until its window rolls over; ``model_caps`` refuses a registration
beyond a model's cap as ``max_agents`` does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from corral import BudgetError, CapacityError, InvalidInputError
from corral.clock import FakeClock
from corral.model import Task
from corral.types import Client
from tests.contract._world import kinds, world

OPERATIONS = ("usage",)
BAD_INPUT = ("usage",)

HOUR_END = 1_700_002_800.0  # the end of the hour (and the 1h window) holding T0
DAY_START = 1_699_920_000.0  # the UTC day holding T0


def _claimed(cluster: Client, node: str = "dev-1", model: str | None = "opus") -> Task:
    cluster.register_node(node, "developer", model=model)
    cluster.add_task("Implement the report")
    claimed = cluster.claim_best_task(node, "developer")
    assert claimed is not None
    return claimed


def _sums(cluster: Client, scope: str, window: str = "1d") -> tuple[int, int, float, int]:
    u = cluster.usage(scope, window)
    return (u.input_tokens, u.output_tokens, u.cost_usd, u.reports)


def test_usage_is_summed_per_scope_from_every_reporting_operation(cluster: Client) -> None:
    """A completion, a failure, a progress report and a heartbeat each add their
    deltas to the cluster's, the node's, its role's, its model's, its pool's and (but
    the heartbeat's) the task's sums; the answer names its window."""
    task = _claimed(cluster)
    cluster.report_progress(
        task.id, "dev-1", epoch=task.epoch, usage={"input_tokens": 100, "cost_usd": 0.25}
    )
    cluster.fail_task(task.id, "dev-1", epoch=task.epoch, usage={"output_tokens": 10})
    again = cluster.claim_best_task("dev-1", "developer")
    assert again is not None and again.id == task.id
    cluster.complete_task(
        task.id,
        "dev-1",
        epoch=again.epoch,
        usage={"input_tokens": 1, "output_tokens": 2, "cost_usd": 0.5},
    )
    cluster.heartbeat("dev-1", usage={"input_tokens": 1000})
    for scope in ("cluster", "node:dev-1", "role:developer", "model:opus", "pool:dev"):
        assert _sums(cluster, scope) == (1101, 12, 0.75, 4), scope
    assert _sums(cluster, f"task:{task.id}") == (101, 12, 0.75, 3)
    assert _sums(cluster, "model:sonnet") == (0, 0, 0.0, 0)
    u = cluster.usage("cluster", "1d")
    assert (u.scope, u.window, u.start, u.end) == ("cluster", "1d", DAY_START, DAY_START + 86400)
    assert "1101 in" in u.text


def test_complete_and_claim_records_usage_in_its_transaction(cluster: Client) -> None:
    """The worker's loop (finish, then claim the next) records the usage too."""
    task = _claimed(cluster)
    cluster.add_task("The next one")
    done, nxt = cluster.complete_and_claim(
        task.id, "dev-1", "developer", epoch=task.epoch, usage={"output_tokens": 7}
    )
    assert done.status == "done" and nxt is not None
    assert _sums(cluster, f"task:{task.id}") == (0, 7, 0.0, 1)


def test_a_refused_completion_records_no_usage(cluster: Client) -> None:
    """A completion with a stale epoch is refused and adds nothing."""
    task = _claimed(cluster)
    with pytest.raises(Exception):  # noqa: B017 - LeaseError (its own tests say which)
        cluster.complete_task(task.id, "dev-1", epoch=task.epoch + 1, usage={"input_tokens": 5})
    assert _sums(cluster, "cluster") == (0, 0, 0.0, 0)


def test_the_windows_roll_over(cluster: Client, clock: FakeClock) -> None:
    """The 1h window ends at the hour's end (the report is no longer in it); the
    day's window still holds it; the next day's does not."""
    task = _claimed(cluster)
    cluster.complete_task(task.id, "dev-1", epoch=task.epoch, usage={"input_tokens": 9})
    assert _sums(cluster, "cluster", "1h")[0] == 9
    clock.set(HOUR_END)
    assert _sums(cluster, "cluster", "1h")[0] == 0
    assert _sums(cluster, "cluster", "5h")[0] == 9
    assert _sums(cluster, "cluster", "1d")[0] == 9
    assert _sums(cluster, "cluster", "7d")[0] == 9
    clock.set(DAY_START + 86400)
    assert _sums(cluster, "cluster", "1d")[0] == 0


@pytest.mark.parametrize(
    ("usage", "message"),
    [
        ({"tokens": 5}, "usage has unknown keys ['tokens']"),
        ({"input_tokens": -1}, "usage.input_tokens must be a non-negative integer"),
        ({"input_tokens": 1.5}, "usage.input_tokens must be a non-negative integer"),
        ({"cost_usd": "1"}, "usage.cost_usd must be a non-negative number"),
        ({"cost_usd": -0.1}, "usage.cost_usd must be a non-negative number"),
    ],
)
def test_bad_usage_is_refused_with_the_rules_message(
    cluster: Client, usage: dict[str, object], message: str
) -> None:
    """Every reporting operation refuses bad usage with the rule's message, and
    writes nothing."""
    task = _claimed(cluster)
    before = world(cluster)
    calls: list[Callable[[], object]] = [
        lambda: cluster.complete_task(task.id, "dev-1", epoch=task.epoch, usage=usage),
        lambda: cluster.fail_task(task.id, "dev-1", epoch=task.epoch, usage=usage),
        lambda: cluster.report_progress(task.id, "dev-1", epoch=task.epoch, usage=usage),
        lambda: cluster.heartbeat("dev-1", usage=usage),
    ]
    for call in calls:
        with pytest.raises(InvalidInputError) as e:
            call()
        assert message in str(e.value)
    assert world(cluster) == before


def test_usage_bad_input(cluster: Client) -> None:
    """An unknown scope or window is refused, naming the parameter."""
    with pytest.raises(InvalidInputError, match="scope must be cluster"):
        cluster.usage("everything", "1d")
    with pytest.raises(InvalidInputError, match="window must be one of"):
        cluster.usage("cluster", "2h")


def test_a_spent_budget_refuses_claims_until_its_window_rolls_over(
    cluster: Client, clock: FakeClock
) -> None:
    """At 80% a ``budget_warning`` event; at 100% a ``budget_spent`` event and the
    nodes in scope are refused with BudgetError naming the budget and when it frees;
    a node out of scope still claims; the next window frees it."""
    cluster.configure(budgets=[{"scope": "role:developer", "window": "1h", "tokens": 100}])
    task = _claimed(cluster)
    cluster.report_progress(task.id, "dev-1", epoch=task.epoch, usage={"input_tokens": 80})
    assert kinds(cluster)[-1] == "budget_warning"
    cluster.complete_task(task.id, "dev-1", epoch=task.epoch, usage={"output_tokens": 20})
    spent = [e for e in cluster.events() if e.kind == "budget_spent"]
    assert [e.data["frees_at"] for e in spent] == [HOUR_END]
    cluster.add_task("More work")
    with pytest.raises(BudgetError) as e:
        cluster.claim_best_task("dev-1", "developer")
    assert "role:developer budget of 100 tokens per 1h is spent" in e.value.message
    assert f"{HOUR_END:.0f}" in e.value.message
    cluster.register_node("arch", "architect")
    assert cluster.claim_best_task("arch", "architect") is not None  # out of scope
    cluster.add_task("Still more work")
    clock.set(HOUR_END)
    assert cluster.claim_best_task("dev-1", "developer") is not None


def test_a_budget_sums_its_windows_earlier_hours_and_its_recent_ones(
    cluster: Client, clock: FakeClock
) -> None:
    """A day's budget counts the reports of every hour of the day: those of hours
    closed a while ago (read once, then kept) and those of the last two hours (read at
    every check), and again once the next hour closes one more."""
    clock.set(DAY_START + 5 * 3600 + 60)
    cluster.configure(budgets=[{"scope": "role:developer", "window": "1d", "tokens": 100}])
    _claimed(cluster)
    cluster.heartbeat("dev-1", usage={"input_tokens": 50})
    clock.set(DAY_START + 8 * 3600)
    cluster.heartbeat("dev-1", usage={"input_tokens": 20})
    assert "budget_warning" not in kinds(cluster)
    cluster.heartbeat("dev-1", usage={"output_tokens": 15})
    assert kinds(cluster)[-1] == "budget_warning"  # 85: 50 of hour 5, 35 of hour 8
    clock.set(DAY_START + 10 * 3600)  # hour 8 is closed now too
    cluster.heartbeat("dev-1", usage={"input_tokens": 15})
    assert kinds(cluster)[-1] == "budget_spent"
    cluster.add_task("More work")
    with pytest.raises(BudgetError):
        cluster.claim_best_task("dev-1", "developer")


def test_complete_and_claim_under_a_spent_budget_completes_and_claims_nothing(
    cluster: Client,
) -> None:
    """The completion is kept; the claim half takes nothing."""
    cluster.configure(budgets=[{"scope": "cluster", "window": "1d", "cost_usd": 1.0}])
    task = _claimed(cluster)
    cluster.add_task("Next")
    cluster.report_progress(task.id, "dev-1", epoch=task.epoch, usage={"cost_usd": 1.0})
    done, nxt = cluster.complete_and_claim(task.id, "dev-1", "developer", epoch=task.epoch)
    assert done.status == "done" and nxt is None
    with pytest.raises(BudgetError):
        cluster.claim_best_task("dev-1", "developer")


def test_a_hard_budget_stops_the_tasks_in_progress_in_its_scope(cluster: Client) -> None:
    """With ``hard = true`` the spent budget's tasks in progress are cancelled (actor
    ``budget``); a task out of scope runs on."""
    cluster.configure(budgets=[{"scope": "model:opus", "window": "1d", "tokens": 10, "hard": True}])
    first = _claimed(cluster, "dev-1")
    second = _claimed(cluster, "dev-2")
    other = _claimed(cluster, "dev-3", model="sonnet")
    cluster.heartbeat("dev-1", usage={"input_tokens": 10})
    assert cluster.get_task(first.id).status == "cancelled"
    assert cluster.get_task(second.id).status == "cancelled"
    assert cluster.get_task(other.id).status == "in_progress"
    cancelled = [e for e in cluster.events() if e.kind == "task_cancelled"]
    assert {e.data.get("actor") for e in cancelled} == {"budget"}


def test_model_caps_refuse_a_registration_beyond_the_cap(cluster: Client) -> None:
    """The third live node of a model capped at 2 is refused with CapacityError; a
    node of another model is admitted; a terminated node frees its place; a live
    node registering again is not one more."""
    cluster.configure(model_caps={"opus": 2}, max_agents=10)
    cluster.register_node("a", "developer", model="opus")
    cluster.register_node("b", "developer", model="opus")
    before = world(cluster)
    with pytest.raises(CapacityError) as e:
        cluster.register_node("c", "developer", model="opus")
    assert "opus" in e.value.message and "cap" in e.value.message
    assert world(cluster) == before
    cluster.register_node("d", "developer", model="sonnet")
    cluster.register_node("b", "developer", model="opus")  # again: not one more
    cluster.terminate_node("a")
    cluster.register_node("c", "developer", model="opus")


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"budgets": [{"scope": "everything", "window": "1d", "tokens": 1}]}, "scope"),
        ({"budgets": [{"scope": "cluster", "window": "2d", "tokens": 1}]}, "window"),
        ({"budgets": [{"scope": "cluster", "window": "1d"}]}, "neither tokens nor cost_usd"),
        ({"budgets": [{"scope": "cluster", "window": "1d", "tokens": -3}]}, "tokens"),
        ({"budgets": [{"scope": "cluster", "window": "1d", "tokens": 1, "x": 1}]}, "unknown"),
        ({"model_caps": {"opus": -1}}, "model_caps[opus]"),
        ({"model_caps": ["opus"]}, "model_caps"),
    ],
)
def test_bad_budgets_and_model_caps_are_refused(
    cluster: Client, changes: dict[str, Any], message: str
) -> None:
    before = cluster.settings()
    with pytest.raises(InvalidInputError, match=message.replace("[", r"\[")):
        cluster.configure(**changes)
    assert cluster.settings() == before
