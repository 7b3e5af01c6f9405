"""The CLI commands made from the registry: an operation whose ``cli`` names a
command that no module of this package writes gets one built from its ``Cluster``
method (``corral.operations``): an option per parameter (renamed and left out as the
operation says for ``cli``), typed by its annotation and checked by its rule
(``RuleType``: the rule's own message, exit 2), its help the method's docstring, its
answer the method's result (``--json`` for JSON)."""

from __future__ import annotations

import inspect
import typing
from typing import Any

import click

from corral import operations
from corral.cli._common import client, emit
from corral.errors import InvalidInputError
from corral.operations import Operation
from corral.validation import Rule

__all__ = ["OperationsGroup", "RuleType", "operation_command"]

_CLICK_TYPES: dict[Any, click.ParamType[Any]] = {
    int: click.INT,
    float: click.FLOAT,
    bool: click.BOOL,
}


class RuleType(click.ParamType[Any]):
    """A parameter's rule as a click type: the value as ``base`` reads it, then the
    rule's check; a refusal is a usage error (exit 2) with the rule's message."""

    def __init__(self, rule: Rule, base: click.ParamType[Any], field: str) -> None:
        self.rule, self.base, self.field = rule, base, field
        self.name = base.name

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        value = self.base.convert(value, param, ctx)
        try:
            return self.rule.check(value, self.field)
        except InvalidInputError as exc:
            self.fail(exc.message, param, ctx)


def operation_command(op: Operation) -> click.Command:
    """The command of ``op``, built from its ``Cluster`` method."""
    from corral.cluster import Cluster
    from corral.signatures import method_types

    method = getattr(Cluster, op.name)
    rules: dict[str, Rule] = getattr(method, "rules", {})
    types = method_types(op)
    rename, omit = op.names.get("cli", {}), op.omits.get("cli", {})
    back: dict[str, str] = {}
    params: list[click.Parameter] = []
    for p in list(inspect.signature(method).parameters.values())[1:]:
        if p.name in omit or p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL):
            continue
        name = rename.get(p.name, p.name)
        back[name] = p.name
        plain = [t for t in typing.get_args(types.get(p.name)) if t is not type(None)]
        base = _CLICK_TYPES.get(plain[0] if plain else types.get(p.name), click.STRING)
        kind = RuleType(rules[p.name], base, p.name) if p.name in rules else base
        required = p.default is p.empty
        params.append(
            click.Option(
                [f"--{name.replace('_', '-')}", name],
                type=kind,
                required=required,
                default=None if required else p.default,
                show_default=not required and p.default is not None,
            )
        )
    params.append(click.Option(["--json", "as_json"], is_flag=True, help="Print JSON."))

    def run(as_json: bool, **given: Any) -> None:
        ctx = click.get_current_context()
        call = getattr(client(ctx, create=op.method != "GET"), op.name)
        emit(call(**{back[k]: v for k, v in given.items()}), as_json)

    assert op.cli is not None
    return click.Command(op.cli.split()[-1], params=params, callback=run, help=op.doc)


class OperationsGroup(click.Group):
    """The top command group: the commands this package's modules register, and one
    made from the registry for an operation whose one-word ``cli`` none of them wrote
    (built when asked for)."""

    def _made(self) -> dict[str, Operation]:
        return {
            op.cli: op
            for op in operations.OPERATIONS
            if op.cli is not None and " " not in op.cli and op.cli not in self.commands
        }

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self._made()})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        found = super().get_command(ctx, cmd_name)
        if found is None and cmd_name in self._made():
            return operation_command(self._made()[cmd_name])
        return found
