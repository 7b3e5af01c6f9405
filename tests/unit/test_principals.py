"""Who a bearer token names and what it may do (``corral.server.auth``): the roles'
rule, the actor events record, and that no named token is remembered between
requests (its store lookup runs every time, so a revocation holds at once)."""

from __future__ import annotations

import pytest

from corral.server.auth import Principal, Tokens
from corral.tokens import NamedToken, hash_token, new_token

OPERATOR = "operator-secret"


def _named(name: str, role: str, token_id: int = 7) -> NamedToken:
    return NamedToken(id=token_id, name=name, role=role, created_at=0.0, created_by="operator")


class _Store:
    """The tokens a store keeps, by hash, and how often it was asked."""

    def __init__(self) -> None:
        self.rows: dict[str, NamedToken] = {}
        self.lookups = 0

    def find(self, token_hash: str) -> NamedToken | None:
        self.lookups += 1
        return self.rows.get(token_hash)


def test_each_principal_is_named_as_events_record_it() -> None:
    assert Principal(None).actor == "operator"
    assert Principal.node("w1").actor == "node:w1"
    assert Principal.named(_named("alice", "viewer")).actor == "token:alice"
    assert Principal.named(_named("ops", "operator")).actor == "token:ops"


@pytest.mark.parametrize(
    ("principal", "scope", "writes", "allowed"),
    [
        (Principal(None), "operator", True, True),
        (Principal.named(_named("ops", "operator")), "operator", True, True),
        (Principal.named(_named("v", "viewer")), "operator", False, True),  # an operator read
        (Principal.named(_named("v", "viewer")), "any", False, True),
        (Principal.named(_named("v", "viewer")), "any", True, False),
        (Principal.named(_named("v", "viewer")), "operator", True, False),
        (Principal.node("w1"), "any", True, True),  # as itself: checked per node argument
        (Principal.node("w1"), "operator", False, False),
        (Principal.node("w1"), "operator", True, False),
        (Principal.named(_named("v", "viewer")), "public", True, True),
    ],
)
def test_a_role_may_call_what_its_rule_says(
    principal: Principal, scope: str, writes: bool, allowed: bool
) -> None:
    why = principal.refusal(scope, writes=writes)
    assert (why is None) == allowed, why
    if principal.role == "viewer" and not allowed:
        assert why is not None and "viewer role" in why and repr(principal.name) in why


def test_only_a_node_is_bound_to_its_own_node() -> None:
    assert Principal.node("w1").may_act_as("w1") and not Principal.node("w1").may_act_as("w2")
    assert Principal(None).may_act_as("w2")
    assert Principal.named(_named("ops", "operator")).may_act_as("w2")


def test_a_named_token_is_looked_up_on_every_request_and_never_remembered() -> None:
    store = _Store()
    token = new_token()
    store.rows[hash_token(token)] = _named("alice", "viewer")
    tokens = Tokens(OPERATOR, lookup=store.find)
    header = f"Bearer {token}"
    assert tokens.named(header) and not tokens.named(f"Bearer {OPERATOR}")
    for _ in range(3):
        principal = tokens.from_header(header)
        assert principal is not None and (principal.name, principal.role) == ("alice", "viewer")
    assert store.lookups == 3
    del store.rows[hash_token(token)]  # revoked
    assert tokens.from_header(header) is None
    assert tokens.from_header(f"Bearer {token}x") is None
    # The operator's and nodes' tokens keep their in-memory check.
    assert tokens.from_header(f"Bearer {OPERATOR}") == Principal(None)
    node = tokens.node_token("w1")
    assert tokens.from_header(f"Bearer {node}") == Principal.node("w1")
    assert not tokens.named(f"Bearer {OPERATOR}")  # remembered: no lookup
    assert store.lookups == 5


def test_without_a_store_a_named_token_names_nobody() -> None:
    assert Tokens(OPERATOR).from_header(f"Bearer {new_token()}") is None


def test_a_token_is_256_random_bits_and_the_store_keeps_its_sha256() -> None:
    a, b = new_token(), new_token()
    assert a != b and a.startswith("tok.") and len(a) == len("tok.") + 43
    assert hash_token(a) != hash_token(b) and len(hash_token(a)) == 64
    assert a not in hash_token(a)
