"""The store claims in exactly the pure scoring function's order (DESIGN.md §4)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import corral
from corral.clock import FakeClock
from corral.scoring import Candidate, best_order, matched_roles, score

T0 = 1_700_000_000.0

WORDS = ["design", "plan", "implement", "code", "tests", "latest", "docs", "review", "api"]

boards = st.lists(
    st.tuples(
        st.sampled_from(["high", "medium", "low"]),
        st.lists(st.sampled_from(WORDS), min_size=1, max_size=3).map(" ".join),
        st.integers(min_value=0, max_value=7200),  # created, seconds after T0
        st.sampled_from([None, None, None, "architect", "developer"]),
    ),
    min_size=1,
    max_size=25,
)


def claim_sequence(
    url: str, board: list[tuple[str, str, int, str | None]], role: str
) -> tuple[list[int], list[Candidate], float]:
    """Add ``board`` at its creation times, then claim everything as ``role``."""
    clock = FakeClock(T0)
    with corral.connect(url, clock=clock) as c:
        cands = []
        for prio, title, created, explicit in sorted(board, key=lambda b: b[2]):
            clock.set(T0 + created)
            t = c.add_task(title, priority=prio, role=explicit)
            cands.append(Candidate(t.id, prio, t.created_at, t.roles))
        now = T0 + 7200 + 60
        clock.set(now)
        c.register_node("N", role)
        claimed = []
        while (got := c.claim_best_task("N", role)) is not None:
            claimed.append(got.id)
        return claimed, cands, now


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(board=boards, role=st.sampled_from(["architect", "developer"]))
def test_sqlite_claim_order_equals_scoring(
    board: list[tuple[str, str, int, str | None]], role: str
) -> None:
    """On random boards, SQLite's claim order is ``best_order``'s."""
    with tempfile.TemporaryDirectory() as d:
        claimed, cands, now = claim_sequence(f"sqlite:///{Path(d) / 'c.db'}", board, role)
    assert claimed == best_order(cands, role, now)


def test_keyword_matching_is_on_word_prefixes() -> None:
    kw = {"architect": ["design", "architect", "plan"], "developer": ["implement", "code", "test"]}
    assert matched_roles("Write tests for login", kw) == ("developer",)
    assert matched_roles("PLANNING the Implementation", kw) == ("architect", "developer")
    assert matched_roles("the latest release", kw) == ()
    assert matched_roles("redesign", kw) == ()
    assert matched_roles("Docs", kw, explicit="architect") == ("architect",)


def test_score_is_the_documents() -> None:
    """high 30, medium 20, low 10, +15 for a role match, +1 per minute of age."""
    assert score("high", False, 0.0, 0.0) == 30
    assert score("medium", True, 0.0, 0.0) == 35
    assert score("low", False, 0.0, 90.0) == 11.5
