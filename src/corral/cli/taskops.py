"""``corral task cancel``, ``task requeue``, ``task cancel-matching`` and
``task requeue-matching``: the operator's actions on tasks, made from the registry.

Each ``Operation`` whose ``cli`` is a ``task`` subcommand that no module writes gets
the command ``corral.cli._operations`` builds from its ``Cluster`` method (an option
per parameter, checked by its rule: exit 2 with the rule's message)."""

from __future__ import annotations

import click

from corral import operations
from corral.cli._operations import operation_command

__all__ = ["register"]


def register(group: click.Group) -> None:
    task = group.commands.get("task")
    if not isinstance(task, click.Group):
        return
    for op in operations.OPERATIONS:
        words = (op.cli or "").split()
        if len(words) == 2 and words[0] == "task" and words[1] not in task.commands:
            task.add_command(operation_command(op))
