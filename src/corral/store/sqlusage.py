"""Usage, budgets and per-model caps in the store (plain functions over a ``Db``;
the rules are ``corral.budgets``'; docs/guardrails.md).

A usage report adds to one row, its node's of the hour (``usage_add``: the node's role
and model and its pool written with it), and to its task's own row (``usage_task_add``,
or in the completion's own statement: the stores' hot paths), in its operation's own
transaction. On SQLite a completion's report is not added to its node's hour by the
completion: it stays on its task's row, marked by the completion's event, and
``roll_up`` adds such reports to their hours in batches (the monitor's ``roll_up_usage``
duty, the events' pruning, a reader that found many, a report with budgets set, a
registration that changes its node's role or model); every read adds the reports not
rolled up yet (``_tail``), from the same snapshot, so every sum is exact. The sums of
a scope over a window are computed at read, from the window's hours
(``usage_sum_*``). With budgets set, the report then reads the sums of the
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
from corral.store import sqldb
from corral.store.rows import Tx
from corral.store.sqldb import Db

__all__ = [
    "add_params",
    "after_completion",
    "announce",
    "before_registration",
    "budget_refusal",
    "budgetless",
    "hard_budgets_spent",
    "hard_targets",
    "model_live_count",
    "pending",
    "record",
    "roll_up",
    "roll_up_all",
    "spent_budgets",
    "usage",
    "usage_by_scope",
]

_NONE = {"input_tokens": 0, "output_tokens": 0, "cost_micros": 0, "reports": 0}
ROLL_BATCH = 5000  # completion reports one roll-up transaction moves, at most
READER_ROLLS = 1000  # a reader that finds this many not rolled up rolls them up after
ALL = 1 << 62  # a tail read's limit: every report
# A completion report not rolled up yet (``_tail``): its hour, node, the node's role,
# model and pool, and its amounts (tokens in and out, micro-dollars).
Pending = tuple[float, str, str, str, str | None, int, int, int]
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


# How long a process trusts its cached settings' "no budgets" before it reads the
# settings' version again: budgets another process sets take effect here within about
# this long, and a report or claim reads nothing more in between.
SETTINGS_RECHECK = 1.0


def budgetless(db: Db) -> bool:
    """Whether this process's cached settings have no budgets and were read within
    ``SETTINGS_RECHECK`` seconds (a report's and a claim's common case: nothing to
    read)."""
    cached = db.settings_cache
    return (
        cached is not None
        and not cached[1].budgets
        and sqldb.monotonic() - db.settings_checked < SETTINGS_RECHECK
    )


def _cached(db: Db) -> Settings | None:
    """The cached settings, unless their "no budgets" may be stale (``budgetless``)."""
    cached = db.settings_cache
    if cached is None or (not cached[1].budgets and not budgetless(db)):
        return None
    return cached[1]


def add_params(node_id: str, usage: Mapping[str, Any], now: float) -> dict[str, Any]:
    """``usage_add``'s parameters: the hour, the node and its pool, and the report's
    (checked: ``validation.check_usage``, whose tokens are ints and cost a float)
    amounts as stored: tokens, and cost in micro-dollars."""
    get = usage.get
    return {
        "hour": rules.bucket_start(now),
        "node_id": node_id,
        "pool": rules.pool_of(node_id),
        "input_tokens": get("input_tokens", 0),
        "output_tokens": get("output_tokens", 0),
        "cost_micros": round(get("cost_usd", 0.0) * rules.MICROS),
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


def _tail(db: Db, tx: Tx) -> list[Any]:
    """The completion reports not rolled up yet, in order (the adapter's
    ``UsageTail``); none where completions write their hours themselves."""
    return [] if db.usage_tail is None else db.usage_tail.rows(tx, ALL)


def pending(rows: list[Any]) -> list[Pending]:
    """A ``UsageTail``'s rows (``seq, ts, node_id``, the three amounts, ``role``,
    ``model``) as the hours' rows would have them."""
    return [
        (
            rules.bucket_start(r["ts"]),
            r["node_id"],
            r["role"],
            r["model"],
            rules.pool_of(r["node_id"]),
            int(r["input_tokens"]),
            int(r["output_tokens"]),
            int(r["cost_micros"]),
        )
        for r in rows
    ]


def _covers(kind: str, name: str, p: Pending) -> bool:
    """Whether scope ``kind:name`` (not a task's) holds pending report ``p``, as
    ``usage_sum_*`` would select its row."""
    if kind == "node":
        return p[1] == name
    if kind == "role":
        return p[2] == name
    if kind == "model":
        return p[3] == name and name != ""
    return p[4] == name  # pool


def _sum(
    db: Db, tx: Tx, scope: str, start: float, end: float, tail: list[Any] | None = None
) -> Any:
    """A scope's sums over ``[start, end)``: its kind's ``usage_sum_*`` (a task's
    from its row, whatever the window), and the reports of its hours not rolled up
    yet (``tail``: ``_tail``'s rows, read by the caller in ``tx``)."""
    if scope == "cluster":
        kind, name = "cluster", ""
        row = tx.one("usage_sum_cluster", start=start, end=end)
    else:
        kind, name = scope.split(":", 1)
        if kind == "task":
            task_id = rules.task_id_of(scope)
            found = None if task_id is None else tx.one("usage_sum_task", key=task_id)
            return _NONE if found is None else found
        row = tx.one(_SUMS[kind], key=name, start=start, end=end)
    due = [
        p
        for p in pending(_tail(db, tx) if tail is None else tail)
        if start <= p[0] < end and (kind == "cluster" or _covers(kind, name, p))
    ]
    if not due:
        return row
    return {
        "input_tokens": int(row["input_tokens"]) + sum(p[5] for p in due),
        "output_tokens": int(row["output_tokens"]) + sum(p[6] for p in due),
        "cost_micros": int(row["cost_micros"]) + sum(p[7] for p in due),
        "reports": int(row["reports"]) + len(due),
    }


def roll_up(db: Db, tx: Tx) -> int:
    """Add the completion reports not rolled up yet (at most ``ROLL_BATCH``) to their
    nodes' hours, in ``tx`` (the adapter's ``UsageTail``); how many (``ROLL_BATCH``:
    there may be more)."""
    return 0 if db.usage_tail is None else db.usage_tail.roll_up(tx, ROLL_BATCH)


def roll_up_all(db: Db) -> int:
    """``roll_up`` until no report is left, a transaction per batch; how many."""
    if db.usage_tail is None:
        return 0
    moved = 0
    while True:
        with db.write_redone() as tx:  # lost in a crash: still on their tasks
            n = roll_up(db, tx)
        moved += n
        if n < ROLL_BATCH:
            return moved


def before_registration(
    db: Db, tx: Tx, node_id: str, role: str, model: str | None, live: Any
) -> None:
    """Before ``node_id`` registers (again) as ``role`` and ``model``, in ``tx``: when
    that changes its latest row's role or model (``live``: its live row, if any), the
    completion reports not rolled up yet are rolled up first, as the tail reads their
    role and model from that row (the adapter's ``UsageTail``)."""
    if db.usage_tail is None:
        return
    row = live if live is not None else tx.one("node_latest_scope", id=node_id)
    if row is None or (row["role"], row["model"]) == (role, model):
        return
    _roll_up_in(db, tx)


def after_completion(db: Db, tx: Tx, node_id: str, now: float) -> None:
    """After a completion with usage in ``tx`` whose report is on its task (SQLite):
    with budgets set, the reports rolled up (so the budgets' reads find no tail) and
    the budgets it crosses announced; without, nothing read or written."""
    if budgetless(db):
        return
    s = db.settings_in(tx)
    if s.budgets:
        _roll_up_in(db, tx)
        _announce(db, tx, s, node_id, now)


def _roll_up_in(db: Db, tx: Tx) -> None:
    """``roll_up`` until no report is left, all in ``tx``."""
    while roll_up(db, tx) == ROLL_BATCH:
        pass


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
            kept = closed[b.scope] = (start, recent, _sum(db, tx, b.scope, start, recent))
        row = kept[2]
        tokens, micros = (
            int(row["input_tokens"]) + int(row["output_tokens"]),
            int(row["cost_micros"]),
        )
        start = recent
    row = _sum(db, tx, b.scope, start, end)
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
    if budgetless(db):
        return
    spent = spent_budgets(db, node_id, now)
    if spent:
        b, used, frees = spent[0]
        raise BudgetError(rules.budget_text(b, used, frees), field="node_id")


def hard_budgets_spent(db: Db, node_id: str, now: float) -> list[rules.Budget]:
    """The hard budgets covering ``node_id`` that are spent (none read without any)."""
    if budgetless(db):
        return []
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
    """A scope's sums over ``[start, end)``. A reader that found ``READER_ROLLS``
    reports or more not rolled up (no monitor rolls them up) rolls them up after."""
    with db.read() as tx:
        tail = _tail(db, tx)
        row = _sum(db, tx, scope, start, end, tail)
    if len(tail) >= READER_ROLLS:
        roll_up_all(db)
    return {
        "input_tokens": int(row["input_tokens"]),
        "output_tokens": int(row["output_tokens"]),
        "cost_usd": int(row["cost_micros"]) / rules.MICROS,
        "reports": int(row["reports"]),
    }


def usage_by_scope(db: Db, start: float, end: float) -> list[dict[str, Any]]:
    """Every scope's sums over ``[start, end)`` but tasks' (/metrics), the reports
    not rolled up yet included (rolled up after, as by ``usage``)."""
    with db.read() as tx:
        rows: list[Any] = tx.all("usage_nodes", start=start, end=end)
        tail = _tail(db, tx)
    rows += [
        {
            "node_id": p[1],
            "role": p[2],
            "model": p[3],
            "pool": p[4],
            "input_tokens": p[5],
            "output_tokens": p[6],
            "cost_micros": p[7],
            "reports": 1,
        }
        for p in pending(tail)
        if start <= p[0] < end
    ]
    if len(tail) >= READER_ROLLS:
        roll_up_all(db)
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
