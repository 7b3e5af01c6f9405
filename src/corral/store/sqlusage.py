"""Usage, budgets and per-model caps in the store (plain functions over a ``Db``;
the rules are ``corral.budgets``'; docs/guardrails.md).

A usage report adds to one row, its node's of the hour (``usage_add``: the node's role
and model and its pool written with it), and to its task's own row (``usage_task_add``,
or in the completion's own statement: the stores' hot paths), in its operation's own
transaction. The sums of a scope over a window are computed at read, from the window's
hours (``usage_sum_*``). With budgets set, the report then reads the sums of the
budgets covering its node and announces a crossing of 80% or 100% once per window
(``budget_marks``): a ``budget_warning`` or ``budget_spent`` event. A claim by a node
covered by a spent budget is refused (``budget_refusal``); with ``hard`` the tasks in
progress in its scope are cancelled (``hard_targets``).
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from typing import Any

from corral import budgets as rules
from corral.errors import BudgetError
from corral.model import Settings
from corral.store.rows import Tx
from corral.store.sqldb import Db

__all__ = [
    "add_params",
    "amounts",
    "announce",
    "budget_refusal",
    "hard_budgets_spent",
    "hard_targets",
    "model_live_count",
    "record",
    "spent_budgets",
    "usage",
    "usage_by_scope",
]

_NONE = {"input_tokens": 0, "output_tokens": 0, "cost_micros": 0, "reports": 0}
# A scope's sums by its kind: on the index of its column of usage_hours.
_SUMS = {
    "node": "usage_sum_node",
    "role": "usage_sum_role",
    "model": "usage_sum_model",
    "pool": "usage_sum_pool",
}


# A budget's sums over the closed hours of its window, per store (``_used``): every
# claim and report of a node in scope reads its budgets, and a 7-day window holds
# 168 hours of every node's rows. Closed hours ended an hour ago or more: a report
# lands in the hour holding its operation's ``now``, so only a clock an hour behind
# could still add to one. The recent hours are read every time.
_CLOSED: weakref.WeakKeyDictionary[Db, dict[str, tuple[float, float, Any]]] = (
    weakref.WeakKeyDictionary()
)


def _cached(db: Db) -> Settings | None:
    cached = db.settings_cache
    return None if cached is None else cached[1]


def amounts(usage: Mapping[str, Any]) -> dict[str, int]:
    """A report's (checked) deltas as stored: tokens, and cost in micro-dollars."""
    return {
        "input_tokens": int(usage.get("input_tokens", 0)),
        "output_tokens": int(usage.get("output_tokens", 0)),
        "cost_micros": round(float(usage.get("cost_usd", 0.0)) * rules.MICROS),
    }


def add_params(node_id: str, usage: Mapping[str, Any], now: float) -> dict[str, Any]:
    """``usage_add``'s parameters: the hour, the node and its pool, the amounts."""
    return {
        "hour": rules.bucket_start(now),
        "node_id": node_id,
        "pool": rules.pool_of(node_id),
        **amounts(usage),
    }


def record(
    db: Db,
    tx: Tx,
    node_id: str,
    task_id: int | None,
    usage: Mapping[str, Any],
    now: float,
    *,
    on_task: bool = True,
) -> None:
    """Add ``usage`` (checked deltas) to its node's row of the hour and (``on_task``:
    unless the caller's statement did) to its task's sums, in ``tx``; announce the
    budgets it takes past 80% or 100%."""
    params = add_params(node_id, usage, now)
    if task_id is not None and on_task:
        tx.run(
            "usage_task_add",
            id=task_id,
            input_tokens=params["input_tokens"],
            output_tokens=params["output_tokens"],
            cost_micros=params["cost_micros"],
        )
    tx.run("usage_add", **params)
    announce(db, tx, node_id, now)


def announce(db: Db, tx: Tx, node_id: str, now: float) -> None:
    """After a report by ``node_id`` in ``tx``: the budgets covering it that the report
    took past 80% or 100% are announced (nothing read without budgets)."""
    s = _cached(db)
    if s is None:
        s = db.settings_in(tx)
    if s.budgets:
        _announce(db, tx, s, node_id, now)


def _covering(tx: Tx, s: Settings, node_id: str) -> list[rules.Budget]:
    row = tx.one("node_live_scope", node_id=node_id)
    if row is None:
        return []
    found = (rules.Budget.of(b) for b in s.budgets)
    return [b for b in found if rules.scope_covers(b.scope, node_id, row["role"], row["model"])]


def _sum(tx: Tx, scope: str, start: float, end: float) -> Any:
    """A scope's sums over ``[start, end)``: its kind's ``usage_sum_*`` (a task's
    from its row, whatever the window)."""
    if scope == "cluster":
        return tx.one("usage_sum_cluster", start=start, end=end)
    kind, name = scope.split(":", 1)
    if kind == "task":
        task_id = rules.task_id_of(scope)
        row = None if task_id is None else tx.one("usage_sum_task", key=task_id)
        return _NONE if row is None else row
    return tx.one(_SUMS[kind], key=name, start=start, end=end)


def _used(db: Db, tx: Tx, b: rules.Budget, now: float) -> tuple[float, float]:
    """How much of ``b`` its window holding ``now`` has spent, and the window's end:
    the closed hours' sums as this store last read them (``_CLOSED``, read again
    once an hour), the recent ones read now."""
    start, end = rules.window_bounds(b.window, now)
    recent = max(start, rules.bucket_start(now) - rules.HOUR)
    tokens, micros = 0, 0
    if recent > start and not b.scope.startswith("task:"):
        closed = _CLOSED.setdefault(db, {})
        kept = closed.get(b.scope)
        if kept is None or kept[:2] != (start, recent):
            kept = closed[b.scope] = (start, recent, _sum(tx, b.scope, start, recent))
        row = kept[2]
        tokens, micros = (
            int(row["input_tokens"]) + int(row["output_tokens"]),
            int(row["cost_micros"]),
        )
        start = recent
    row = _sum(tx, b.scope, start, end)
    tokens += int(row["input_tokens"]) + int(row["output_tokens"])
    micros += int(row["cost_micros"])
    return rules.fraction_used(b, tokens, micros), end


def _announce(db: Db, tx: Tx, s: Settings, node_id: str, now: float) -> None:
    for b in _covering(tx, s, node_id):
        used, end = _used(db, tx, b, now)
        start = end - rules.WINDOWS[b.window]
        mark_row = tx.one("budget_mark_get", budget=b.name, window_start=start)
        mark = 0.0 if mark_row is None else float(mark_row["mark"])
        passed = rules.crossed(mark, used)
        if not passed:
            continue
        tx.run("budget_mark_put", budget=b.name, window_start=start, mark=passed[-1])
        kind = "budget_spent" if passed[-1] >= 1.0 else "budget_warning"
        db.event(
            tx,
            now,
            kind,
            node_id,
            budget=b.name,
            scope=b.scope,
            window=b.window,
            used=round(used, 4),
            frees_at=end,
            hard=b.hard,
        )


def spent_budgets(db: Db, node_id: str, now: float) -> list[tuple[rules.Budget, float, float]]:
    """The budgets covering ``node_id`` that are spent now: (budget, fraction used,
    when its window frees it)."""
    with db.read() as tx:
        s = db.settings_in(tx)
        if not s.budgets:
            return []
        out = []
        for b in _covering(tx, s, node_id):
            used, end = _used(db, tx, b, now)
            if used >= 1.0:
                out.append((b, used, end))
        return out


def budget_refusal(db: Db, node_id: str, now: float) -> None:
    """Raise ``BudgetError`` when a budget covering ``node_id`` is spent (a claim by
    it is refused). Without budgets in this process's settings, no read at all."""
    s = _cached(db)
    if s is not None and not s.budgets:
        return
    spent = spent_budgets(db, node_id, now)
    if spent:
        b, used, frees = spent[0]
        raise BudgetError(rules.budget_text(b, used, frees), field="node_id")


def hard_budgets_spent(db: Db, node_id: str, now: float) -> list[rules.Budget]:
    """The hard budgets covering ``node_id`` that are spent (none read without any)."""
    s = _cached(db)
    if s is not None and not any(b.get("hard") for b in s.budgets):
        return []
    return [b for b, _, _ in spent_budgets(db, node_id, now) if b.hard]


def hard_targets(db: Db, spent: list[rules.Budget]) -> list[tuple[int, str]]:
    """The tasks in progress in the scope of a hard budget of ``spent``, each with
    the reason to stop it (``SQLStore.stop_hard`` cancels them)."""
    if not spent:
        return []
    with db.read() as tx:
        held = tx.all("tasks_in_progress_holders")
    out: list[tuple[int, str]] = []
    for row in held:
        for b in spent:
            if rules.scope_covers(b.scope, row["assigned_to"], row["role"], row["model"]):
                out.append((int(row["id"]), f"{b.name} is spent"))
                break
    return out


def model_live_count(tx: Tx, model: str) -> int:
    """The live nodes of ``model`` (under the registry lock)."""
    return int(tx.one("nodes_count_live_model", model=model)["n"])


def usage(db: Db, scope: str, start: float, end: float) -> dict[str, Any]:
    """A scope's sums over ``[start, end)``."""
    with db.read() as tx:
        row = _sum(tx, scope, start, end)
    return {
        "input_tokens": int(row["input_tokens"]),
        "output_tokens": int(row["output_tokens"]),
        "cost_usd": int(row["cost_micros"]) / rules.MICROS,
        "reports": int(row["reports"]),
    }


def usage_by_scope(db: Db, start: float, end: float) -> list[dict[str, Any]]:
    """Every scope's sums over ``[start, end)`` but tasks' (/metrics)."""
    with db.read() as tx:
        rows = tx.all("usage_nodes", start=start, end=end)
    return [
        {
            "scope": scope,
            "input_tokens": sums[0],
            "output_tokens": sums[1],
            "cost_usd": sums[2] / rules.MICROS,
            "reports": sums[3],
        }
        for scope, sums in rules.scope_sums(rows).items()
    ]
