"""Usage, budgets and per-model caps in the store (plain functions over a ``Db``;
the rules are ``corral.budgets``'; docs/guardrails.md).

A usage report is one upsert (``usage_add``) in its operation's own transaction: the
hour's bucket of every scope it counts for. With budgets set, the report then reads
the sums of the budgets covering its node and announces a crossing of 80% or 100%
once per window (``budget_marks``): a ``budget_warning`` or ``budget_spent`` event.
A claim by a node covered by a spent budget is refused (``budget_refusal``); with
``hard`` the tasks in progress in its scope are cancelled (``hard_targets``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from corral import budgets as rules
from corral.errors import BudgetError
from corral.model import Settings
from corral.store.rows import Tx
from corral.store.sqldb import Db

__all__ = [
    "budget_refusal",
    "hard_budgets_spent",
    "hard_targets",
    "model_live_count",
    "record",
    "spent_budgets",
    "usage",
    "usage_by_scope",
]


def _cached(db: Db) -> Settings | None:
    cached = db.settings_cache
    return None if cached is None else cached[1]


def record(
    db: Db, tx: Tx, node_id: str, task_id: int | None, usage: Mapping[str, Any], now: float
) -> None:
    """Add ``usage`` (checked deltas) to the hour's buckets of every scope of the
    report, in ``tx``; announce the budgets it takes past 80% or 100%."""
    tx.run(
        "usage_add",
        hour=rules.bucket_start(now),
        node_id=node_id,
        pool=rules.pool_of(node_id),
        task_id=task_id,
        input_tokens=int(usage.get("input_tokens", 0)),
        output_tokens=int(usage.get("output_tokens", 0)),
        cost_micros=round(float(usage.get("cost_usd", 0.0)) * rules.MICROS),
    )
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
    hours = json.dumps(rules.hours(start, end))
    return tx.one("usage_sum", scope=rules.scope_key(scope), hours=hours)


def _used(tx: Tx, b: rules.Budget, now: float) -> tuple[float, float]:
    start, end = rules.window_bounds(b.window, now)
    row = _sum(tx, b.scope, start, end)
    tokens = int(row["input_tokens"]) + int(row["output_tokens"])
    return rules.fraction_used(b, tokens, int(row["cost_micros"])), end


def _announce(db: Db, tx: Tx, s: Settings, node_id: str, now: float) -> None:
    for b in _covering(tx, s, node_id):
        used, end = _used(tx, b, now)
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
            used, end = _used(tx, b, now)
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
        rows = tx.all("usage_scopes", hours=json.dumps(rules.hours(start, end)))
    return [
        {
            "scope": r["scope"],
            "input_tokens": int(r["input_tokens"]),
            "output_tokens": int(r["output_tokens"]),
            "cost_usd": int(r["cost_micros"]) / rules.MICROS,
            "reports": int(r["reports"]),
        }
        for r in rows
    ]
