"""``corral token``: named bearer tokens with a role (``corral.tokens``).

    corral token create NAME [--role operator|viewer]   # prints the token, once
    corral token list                                   # never a token
    corral token revoke NAME                            # refused at once, everywhere

The token goes to stdout alone (``TOKEN=$(corral token create ci --role viewer)``),
what it is to stderr. Over ``--url http://…`` these need an operator token.
"""

from __future__ import annotations

import time

import click

from corral.cli._common import CONTEXT_SETTINGS, client, emit, json_option
from corral.tokens import NamedToken

__all__ = ["register"]


def _when(t: float | None) -> str:
    return "never" if t is None else time.strftime("%Y-%m-%d %H:%M", time.gmtime(t))


def _table(tokens: list[NamedToken]) -> str:
    if not tokens:
        return "(no named tokens; the operator token is not listed)"
    head = f"{'NAME':<24} {'ROLE':<9} {'CREATED (UTC)':<17} {'BY':<20} LAST USED (UTC)"
    rows = [
        f"{t.name:<24} {t.role:<9} {_when(t.created_at):<17} {t.created_by:<20}"
        f" {_when(t.last_used_at)}"
        for t in tokens
    ]
    return "\n".join([head, *rows])


@click.group(context_settings=CONTEXT_SETTINGS)
def token() -> None:
    """Named bearer tokens: an operator's (may do everything) or a viewer's (reads only)."""


@token.command("create")
@click.argument("name")
@click.option(
    "--role",
    default="viewer",
    show_default=True,
    metavar="operator|viewer",
    help="operator: may do everything; viewer: may only read.",
)
@json_option
@click.pass_context
def token_create(ctx: click.Context, name: str, role: str, as_json: bool) -> None:
    """Make a token named NAME and print it: it is shown this once (the cluster
    keeps only its hash)."""
    made = client(ctx, create=True).create_token(name, role)
    if as_json:
        emit(made, True)
        return
    click.echo(f"token {made.name} ({made.role}); shown this once, keep it:", err=True)
    click.echo(made.token)


@token.command("list")
@json_option
@click.pass_context
def token_list(ctx: click.Context, as_json: bool) -> None:
    """The named tokens: name, role, when made and by whom, last use (never a token)."""
    emit(client(ctx).list_tokens(), as_json, _table)


@token.command("revoke")
@click.argument("name")
@json_option
@click.pass_context
def token_revoke(ctx: click.Context, name: str, as_json: bool) -> None:
    """Revoke the token NAME: refused from its next request on."""
    emit(client(ctx).revoke_token(name), as_json, lambda t: f"revoked token {t.name} ({t.role})")


def register(group: click.Group) -> None:
    group.add_command(token)
