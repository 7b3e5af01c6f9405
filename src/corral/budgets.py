"""Usage, budgets and per-model caps: the pure rules (docs/guardrails.md). No I/O, no
clock reads: ``now`` is an argument.

- **Usage** is reported as deltas ``{input_tokens, output_tokens, cost_usd}``; the
  store adds each report to its node's hourly row (``bucket_start``), which carries
  the node's role, model and pool, and to its task's sums. It counts for every scope
  of ``scopes_of``: ``cluster``, ``task:N``, ``node:ID``, ``role:R``, ``model:M`` and
  ``pool:P`` (a pool member is the node ``<pool>-<n>``, corral.fleet.pools), whose
  sums are computed at read (``scope_sums``). Cost is kept in micro-dollars
  (integers), so concurrent reports sum exactly.
- **Windows** are fixed and aligned to the epoch (UTC): ``1h`` is the current hour,
  ``5h`` the current five-hour block, ``1d`` the current UTC day, ``7d`` the current
  seven-day block (``window_bounds``). A window rolls over at its end, which is when
  a spent budget frees.
- **Budgets** (``budgets`` setting): ``{scope, window, tokens, cost_usd, hard}``; a
  budget is spent when either limit it sets is reached (``fraction_used`` >= 1); at
  ``WARN_AT`` of it an event says so.
- **Model caps** (``model_caps`` setting): at most N live nodes of a model.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from corral.errors import InvalidInputError
from corral.validation import USAGE_MAX_COST as MAX_COST
from corral.validation import USAGE_MAX_TOKENS as MAX_TOKENS

__all__ = [
    "BUDGETS_SCHEMA",
    "BUDGET_KEYS",
    "HOUR",
    "MAX_COST",
    "MAX_TOKENS",
    "MICROS",
    "MODEL_CAPS_SCHEMA",
    "SCOPE_SCHEMA",
    "WARN_AT",
    "WINDOWS",
    "Budget",
    "bucket_start",
    "budget_text",
    "check_budgets",
    "check_model_caps",
    "check_scope",
    "crossed",
    "fraction_used",
    "model_cap_reached",
    "pool_hold",
    "pool_of",
    "scope_covers",
    "scope_sums",
    "scopes_of",
    "task_id_of",
    "window_bounds",
]

HOUR = 3600.0
WINDOWS: dict[str, float] = {"1h": HOUR, "5h": 5 * HOUR, "1d": 24 * HOUR, "7d": 7 * 24 * HOUR}
WARN_AT = 0.8  # a budget this far spent is announced (an event and an alert)
MICROS = 1_000_000  # cost is kept in micro-dollars: integer sums are exact
BUDGET_KEYS = ("scope", "window", "tokens", "cost_usd", "hard")
_SCOPE_KINDS = ("role", "model", "pool", "node", "task")
_MEMBER = re.compile(r"^(.+)-[0-9]+$")
# A scope's or a capped model's name: 1-200 characters, no control characters, not
# starting with a space.
_NAME = r"[^\s\x00-\x1f\x7f-\x9f][^\x00-\x1f\x7f-\x9f]{0,199}"
_SCOPE = re.compile(rf"^(?:cluster|(?:{'|'.join(_SCOPE_KINDS)}):{_NAME})$")
_MODEL = re.compile(rf"^{_NAME}$")
SCOPE_SCHEMA: dict[str, Any] = {"type": "string", "pattern": _SCOPE.pattern}
BUDGETS_SCHEMA: dict[str, Any] = {
    "type": "array",
    "items": {
        "type": "object",
        "required": ["scope", "window"],
        "properties": {
            "scope": SCOPE_SCHEMA,
            "window": {"enum": list(WINDOWS)},
            "tokens": {"type": "integer", "minimum": 1, "maximum": MAX_TOKENS},
            "cost_usd": {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_COST},
            "hard": {"type": "boolean"},
        },
        "additionalProperties": False,
        "anyOf": [{"required": ["tokens"]}, {"required": ["cost_usd"]}],
    },
}
MODEL_CAPS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "propertyNames": {"pattern": _MODEL.pattern},
    "additionalProperties": {"type": "integer", "minimum": 0, "maximum": MAX_TOKENS},
}


def bucket_start(now: float) -> float:
    """The start of the hourly bucket ``now`` falls in."""
    return math.floor(now / HOUR) * HOUR


def task_id_of(scope: str) -> int | None:
    """The task a ``task:N`` scope names (``task:42`` or ``task:task-42``), None when
    it names none."""
    rest = scope.removeprefix("task:").removeprefix("task-")
    if scope.startswith("task:") and rest.isascii() and rest.isdigit() and len(rest) <= 18:
        return int(rest)
    return None


def scope_sums(rows: Iterable[Mapping[str, Any]]) -> dict[str, tuple[int, int, int, int]]:
    """Every scope's sums but tasks' (input tokens, output tokens, cost in
    micro-dollars, reports), in scope order, from the per-node rows (``node_id``,
    ``role``, ``model``, ``pool`` and the four sums; ``''`` or None: no role, model or
    pool)."""
    out: dict[str, list[int]] = {}
    for r in rows:
        sums = (
            int(r["input_tokens"]),
            int(r["output_tokens"]),
            int(r["cost_micros"]),
            int(r["reports"]),
        )
        scopes = ["cluster", f"node:{r['node_id']}"]
        scopes += [f"{k}:{r[k]}" for k in ("role", "model", "pool") if r[k]]
        for scope in scopes:
            acc = out.setdefault(scope, [0, 0, 0, 0])
            for i, v in enumerate(sums):
                acc[i] += v
    return {k: (v[0], v[1], v[2], v[3]) for k, v in sorted(out.items())}


def window_bounds(window: str, now: float) -> tuple[float, float]:
    """``[start, end)`` of the ``window`` (``WINDOWS``) that holds ``now``."""
    size = WINDOWS[window]
    start = math.floor(now / size) * size
    return start, start + size


@lru_cache(maxsize=4096)  # a report's hot path: a node's pool, once per node
def pool_of(node_id: str) -> str | None:
    """The pool a node is a member of: ``dev`` for ``dev-3`` (the fleet's naming),
    None for a node not named ``<pool>-<n>``."""
    m = _MEMBER.match(node_id)
    return None if m is None else m.group(1)


def scopes_of(
    node_id: str, role: str | None, model: str | None, task_id: int | None = None
) -> list[str]:
    """Every scope a report by ``node_id`` (of ``role`` and ``model``, on ``task_id``)
    counts for."""
    out = ["cluster", f"node:{node_id}"]
    if role is not None:
        out.append(f"role:{role}")
    if model is not None:
        out.append(f"model:{model}")
    pool = pool_of(node_id)
    if pool is not None:
        out.append(f"pool:{pool}")
    if task_id is not None:
        out.append(f"task:{task_id}")
    return out


def scope_covers(scope: str, node_id: str, role: str | None, model: str | None) -> bool:
    """Whether a budget of ``scope`` covers the node (its claims, its pool's spawns)."""
    return scope in scopes_of(node_id, role, model)


def _whole(value: Any, most: float) -> int | None:
    """``value`` as a whole number from 0 to ``most`` (``5`` or ``5.0``), else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, float) and not value.is_integer():
        return None
    return int(value) if 0 <= value <= most else None


def check_scope(value: Any, field: str = "scope") -> str:
    """``cluster`` or ``KIND:NAME`` (kind one of role, model, pool, node, task; the
    name 1-200 characters, no control characters, not starting with a space)."""
    if isinstance(value, str) and _SCOPE.match(value):
        return value
    raise InvalidInputError(
        f"{field} must be cluster, or role:R, model:M, pool:P, node:N or task:T; got {value!r:.60}",
        field=field,
    )


@dataclass(frozen=True, slots=True)
class Budget:
    """One budget of the ``budgets`` setting: at most ``tokens`` (input + output) and
    ``cost_usd`` in each ``window`` for ``scope`` (None: no limit of that kind);
    ``hard`` also stops the tasks in progress in scope once spent."""

    scope: str
    window: str
    tokens: int | None = None
    cost_usd: float | None = None
    hard: bool = False

    @classmethod
    def of(cls, d: Mapping[str, Any]) -> Budget:
        return cls(
            scope=d["scope"],
            window=d["window"],
            tokens=d.get("tokens"),
            cost_usd=d.get("cost_usd"),
            hard=bool(d.get("hard", False)),
        )

    @property
    def name(self) -> str:
        limits = []
        if self.tokens is not None:
            limits.append(f"{self.tokens} tokens")
        if self.cost_usd is not None:
            limits.append(f"${self.cost_usd:g}")
        return f"{self.scope} budget of {' and '.join(limits)} per {self.window}"


def check_budgets(value: Any, field: str = "budgets") -> list[dict[str, Any]]:
    """The ``budgets`` setting, each item checked: a known scope and window, at least
    one of ``tokens`` (a positive integer) and ``cost_usd`` (a positive number),
    ``hard`` true or false; unknown keys refused."""
    if not isinstance(value, list | tuple):
        raise InvalidInputError(f"{field} must be a list of budgets", field=field)
    out: list[dict[str, Any]] = []
    for i, item in enumerate(value):
        where = f"{field}[{i}]"
        if not isinstance(item, Mapping):
            raise InvalidInputError(f"{where} must be an object", field=field)
        unknown = sorted(set(item) - set(BUDGET_KEYS))
        if unknown:
            raise InvalidInputError(
                f"{where} has unknown keys {unknown}; known: {', '.join(BUDGET_KEYS)}",
                field=field,
            )
        scope = check_scope(item.get("scope"), f"{where}.scope")
        window = item.get("window")
        if window not in WINDOWS:
            raise InvalidInputError(
                f"{where}.window must be one of {', '.join(WINDOWS)}; got {window!r:.40}",
                field=field,
            )
        budget: dict[str, Any] = {"scope": scope, "window": window}
        tokens, cost = item.get("tokens"), item.get("cost_usd")
        if tokens is None and cost is None:
            raise InvalidInputError(f"{where} sets neither tokens nor cost_usd", field=field)
        if "tokens" in item:
            whole = _whole(tokens, MAX_TOKENS)
            if not whole:
                raise InvalidInputError(
                    f"{where}.tokens must be a positive integer up to {MAX_TOKENS};"
                    f" got {tokens!r:.40}",
                    field=field,
                )
            budget["tokens"] = whole
        if "cost_usd" in item:
            if (
                isinstance(cost, bool)
                or not isinstance(cost, int | float)
                or not math.isfinite(cost)
                or not 0 < cost <= MAX_COST
            ):
                raise InvalidInputError(
                    f"{where}.cost_usd must be a positive number up to {MAX_COST:g};"
                    f" got {cost!r:.40}",
                    field=field,
                )
            budget["cost_usd"] = float(cost)
        hard = item.get("hard", False)
        if not isinstance(hard, bool):
            raise InvalidInputError(f"{where}.hard must be true or false", field=field)
        budget["hard"] = hard
        out.append(budget)
    return out


def check_model_caps(value: Any, field: str = "model_caps") -> dict[str, int]:
    """The ``model_caps`` setting: model names to a positive number of live nodes."""
    if not isinstance(value, Mapping):
        raise InvalidInputError(f"{field} must map model names to node counts", field=field)
    out: dict[str, int] = {}
    for model, cap in value.items():
        if not isinstance(model, str) or not _MODEL.match(model):
            raise InvalidInputError(
                f"{field}: a model name is 1-200 characters, no control characters, not"
                f" starting with a space; got {model!r:.40}",
                field=field,
            )
        whole = _whole(cap, MAX_TOKENS)
        if whole is None:
            raise InvalidInputError(
                f"{field}[{model}] must be a non-negative integer; got {cap!r:.40}", field=field
            )
        out[model] = whole
    return out


def model_cap_reached(model: str | None, live_of_model: int, caps: Mapping[str, int]) -> bool:
    """Whether one more live node of ``model`` would exceed its cap (a model without
    a cap never is)."""
    if model is None or model not in caps:
        return False
    return live_of_model >= caps[model]


def pool_hold(
    pool: str,
    role: str,
    model: str | None,
    used: Mapping[tuple[str, str], tuple[int, int]],
    budgets: Sequence[Mapping[str, Any]],
    caps: Mapping[str, int],
    live_of_model: int,
) -> str | None:
    """Why pool ``pool`` (of ``role``, its members of ``model``) may not spawn now, or
    None: a spent budget covering it (``used``: each budget's scope and window to its
    tokens and cost in micro-dollars), or its model at its cap (``live_of_model``:
    the model's live and starting nodes)."""
    scopes = {"cluster", f"role:{role}", f"pool:{pool}"} | ({f"model:{model}"} if model else set())
    for b in (Budget.of(d) for d in budgets):
        if b.scope not in scopes:
            continue
        tokens, micros = used.get((b.scope, b.window), (0, 0))
        if fraction_used(b, tokens, micros) >= 1.0:
            return f"budget spent: {b.name}"
    if model_cap_reached(model, live_of_model, caps):
        return f"model {model} at its cap ({caps[model or '']} live nodes)"
    return None


def fraction_used(budget: Budget, tokens: int, cost_micros: int) -> float:
    """How much of ``budget`` the window's usage has spent: the larger of its limits'
    fractions (1.0 or more: spent)."""
    used = 0.0
    if budget.tokens is not None:
        used = max(used, tokens / budget.tokens)
    if budget.cost_usd is not None:
        used = max(used, cost_micros / (budget.cost_usd * MICROS))
    return used


def crossed(before: float, after: float) -> list[float]:
    """The thresholds (``WARN_AT``, 1.0) a report took a budget across."""
    return [t for t in (WARN_AT, 1.0) if before < t <= after]


def budget_text(budget: Budget, used: float, frees_at: float) -> str:
    """The refusal of a claim: which budget, and when its window frees it."""
    return (
        f"{budget.name} is spent ({used:.0%} used); it frees at {frees_at:.0f}"
        f" (the {budget.window} window's end, seconds since the epoch)"
    )
