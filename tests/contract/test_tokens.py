"""Named tokens (docs/security.md, "Tokens and roles"): made with a name and a role,
shown once, listed without the token, revoked by name. Each step is an event with
the token's name, role and actor; a refused call changes nothing."""

from __future__ import annotations

from typing import Any

import pytest

from corral import ConflictError, InvalidInputError, NotFoundError
from corral.clock import FakeClock
from tests.contract._world import T0, kinds, world

OPERATIONS = ("create_token", "list_tokens", "revoke_token")
BAD_INPUT = ("create_token", "revoke_token")


def _tokens(c: Any) -> list[dict[str, Any]]:
    return [t.to_dict() for t in c.list_tokens()]


def test_a_token_is_shown_once_listed_by_name_and_revoked(cluster: Any, clock: FakeClock) -> None:
    alice = cluster.create_token("alice", "viewer")
    assert (alice.name, alice.role, alice.created_at, alice.created_by) == (
        "alice",
        "viewer",
        T0,
        "operator",
    )
    assert alice.token is not None and alice.token.startswith("tok.") and len(alice.token) > 40
    clock.advance(5)
    ops = cluster.create_token("ops-bot", "operator")
    assert ops.token != alice.token
    assert cluster.create_token("ci.runner_1").role == "viewer"  # the least by default
    listed = cluster.list_tokens()
    assert [(t.name, t.role, t.created_at, t.last_used_at) for t in listed] == [
        ("alice", "viewer", T0, None),
        ("ci.runner_1", "viewer", T0 + 5, None),
        ("ops-bot", "operator", T0 + 5, None),
    ]
    assert all(t.token is None for t in listed)  # never the token again
    assert alice.token not in repr(_tokens(cluster))
    gone = cluster.revoke_token("alice")
    assert (gone.name, gone.role, gone.token) == ("alice", "viewer", None)
    assert [t.name for t in cluster.list_tokens()] == ["ci.runner_1", "ops-bot"]
    events = [e for e in cluster.events() if e.kind.startswith("token_")]
    assert [(e.kind, e.data) for e in events] == [
        ("token_created", {"name": "alice", "role": "viewer", "actor": "operator"}),
        ("token_created", {"name": "ops-bot", "role": "operator", "actor": "operator"}),
        ("token_created", {"name": "ci.runner_1", "role": "viewer", "actor": "operator"}),
        ("token_revoked", {"name": "alice", "role": "viewer", "actor": "operator"}),
    ]
    assert all(alice.token not in str(e.to_dict()) for e in cluster.events())
    again = cluster.create_token("alice", "operator")  # a revoked name may be reused
    assert (again.role, again.token != alice.token) == ("operator", True)


def test_a_taken_name_or_an_unknown_one_is_refused_and_changes_nothing(cluster: Any) -> None:
    cluster.create_token("alice", "viewer")
    before = world(cluster), _tokens(cluster)
    with pytest.raises(ConflictError) as conflict:
        cluster.create_token("alice", "operator")
    assert conflict.value.field == "name" and "alice" in str(conflict.value)
    with pytest.raises(NotFoundError) as missing:
        cluster.revoke_token("bob")
    assert missing.value.field == "name"
    assert (world(cluster), _tokens(cluster)) == before


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda c: c.create_token("", "viewer"), "name"),
        (lambda c: c.create_token("a b", "viewer"), "name"),
        (lambda c: c.create_token("-x", "viewer"), "name"),
        (lambda c: c.create_token("x" * 65, "viewer"), "name"),
        (lambda c: c.create_token("operator", "operator"), "name"),  # the first-run token's
        (lambda c: c.create_token(7, "viewer"), "name"),
        (lambda c: c.create_token("bob", "admin"), "role"),
        (lambda c: c.create_token("bob", "node"), "role"),
        (lambda c: c.revoke_token(""), "name"),
        (lambda c: c.revoke_token("a/b"), "name"),
        (lambda c: c.revoke_token("operator"), "name"),
    ],
)
def test_token_operations_refuse_bad_input(cluster: Any, call: Any, field: str) -> None:
    cluster.create_token("alice", "viewer")
    before = world(cluster), _tokens(cluster)
    with pytest.raises(InvalidInputError) as exc:
        call(cluster)
    assert exc.value.field == field
    assert (world(cluster), _tokens(cluster)) == before
    assert kinds(cluster)[-1] == "token_created"
