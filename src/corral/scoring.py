"""The scoring rule: which pending task a node should claim.

    score = priority_points (high 30, medium 20, low 10)
            + 15 if the task matches the role + age in minutes

The age term grows at the same rate for every task, so the *order* never changes
with time: ordering by score is ordering by ``sort_key = created_at - 60 * points``
(ascending), with ``ROLE_BONUS_SECONDS`` subtracted for tasks that match the role.
The store keeps ``sort_key`` in an index; ``best_order`` is the reference the store
is tested against.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

__all__ = [
    "PRIORITY_POINTS",
    "ROLE_BONUS",
    "ROLE_BONUS_SECONDS",
    "Candidate",
    "best_order",
    "matched_roles",
    "score",
    "sort_key",
    "task_roles",
]

PRIORITY_POINTS: Mapping[str, int] = {"high": 30, "medium": 20, "low": 10}
ROLE_BONUS = 15
ROLE_BONUS_SECONDS = 60 * ROLE_BONUS  # one score point is one minute of age


def _keyword_pattern(keywords: Iterable[str]) -> re.Pattern[str] | None:
    words = [re.escape(k.strip()) for k in keywords if k.strip()]
    if not words:
        return None
    # A keyword matches at the start of a word: "tests" and "testing" match "test",
    # "latest" does not.
    return re.compile(r"(?<![0-9A-Za-z_])(?:" + "|".join(words) + ")", re.IGNORECASE)


def matched_roles(
    text: str, role_keywords: Mapping[str, Sequence[str]], explicit: str | None = None
) -> tuple[str, ...]:
    """The roles whose keywords start a word of ``text`` (plus an explicit role)."""
    found = set()
    for role, keywords in role_keywords.items():
        pattern = _keyword_pattern(keywords)
        if pattern is not None and pattern.search(text):
            found.add(role)
    if explicit:
        found.add(explicit)
    return tuple(sorted(found))


def task_roles(
    title: str, description: str, role_keywords: Mapping[str, Sequence[str]], role: str | None
) -> str:
    """A task's role matches, as the store keeps them (space-separated, sorted): the
    roles whose keywords start a word of its title or description, plus its explicit
    ``role``. The one rule for every task, whoever adds it (``add_task``, the
    monitor's manager-recovery task) and when ``role_keywords`` change."""
    return " ".join(matched_roles(f"{title}\n{description}", role_keywords, role))


def score(priority: str, matched: bool, created_at: float, now: float) -> float:
    """The document's score, age in fractional minutes."""
    points = PRIORITY_POINTS[priority] + (ROLE_BONUS if matched else 0)
    return (60 * points + (now - created_at)) / 60


def sort_key(priority: str, created_at: float) -> float:
    """The index key (smaller is better) of a task, without the role bonus."""
    return created_at - 60 * PRIORITY_POINTS[priority]


@dataclass(frozen=True, slots=True)
class Candidate:
    id: int
    priority: str
    created_at: float
    roles: tuple[str, ...] = ()


def best_order(tasks: Iterable[Candidate], role: str, now: float) -> list[int]:
    """Task ids in the order a node of ``role`` claims them: highest score first,
    ties to the older task, then the lower id."""
    return [
        t.id
        for t in sorted(
            tasks,
            key=lambda t: (
                -score(t.priority, role in t.roles, t.created_at, now),
                t.created_at,
                t.id,
            ),
        )
    ]
