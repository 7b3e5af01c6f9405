"""What the contract tests compare before and after a refused call."""

from __future__ import annotations

from typing import Any

T0 = 1_700_000_000.0  # the ``clock`` fixture's start


def world(c: Any) -> tuple[Any, ...]:
    """Everything observable: nodes, tasks, the event log, the settings and the
    supervised processes."""
    return (
        [n.to_dict() for n in c.list_nodes()],
        [p.to_dict() for p in c.list_processes()],
        [t.to_dict() for t in c.list_tasks(limit=10_000)],
        [e.to_dict() for e in c.events(limit=10_000)],
        c.settings(),
    )


def kinds(c: Any, since: int = 0) -> list[str]:
    return [e.kind for e in c.events(since=since)]
