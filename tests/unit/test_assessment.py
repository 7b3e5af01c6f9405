"""anti-idle.md "Decision Logic": every branch, and the pure function against a
literal transcription of the document on random counts."""

from __future__ import annotations

import dataclasses

from hypothesis import given
from hypothesis import strategies as st

from corral.assessment import Counts, decide


def document(
    pending: int,
    in_progress: int,
    active_count: int,
    active_agents: int,
    idle_agents: int,
    max_agents: int,
) -> tuple[str, str]:
    """The document's code, word for word (total_active is active_count)."""
    total_active = active_count
    if pending == 0 and in_progress == 0:
        return "idle", "terminate_idle"
    elif pending >= 3 and active_count < max_agents:  # noqa: SIM114 (word for word)
        return "overloaded", "spawn_developer"
    elif pending > 0 and active_agents == 0 and total_active < max_agents:
        return "overloaded", "spawn_developer"
    elif pending <= 1 and total_active > 1 and idle_agents > 0:
        return "underutilized", "terminate_idle"
    else:
        return "balanced", "maintain"


counts = st.builds(
    Counts,
    pending=st.integers(0, 8),
    in_progress=st.integers(0, 5),
    active_count=st.integers(0, 6),
    working=st.integers(0, 6),
    idle=st.integers(0, 6),
    max_agents=st.integers(1, 6),
    architect_only=st.just(0),
)


@given(counts)
def test_decision_equals_the_document(c: Counts) -> None:
    assert decide(c) == document(
        c.pending, c.in_progress, c.active_count, c.working, c.idle, c.max_agents
    )


@given(counts, st.integers(0, 8))
def test_spawn_architect_only_when_most_pending_are_architect_work(c: Counts, arch: int) -> None:
    arch = min(arch, c.pending)
    status, rec = decide(dataclasses.replace(c, architect_only=arch))
    base = decide(c)
    if base[1] == "spawn_developer" and 2 * arch > c.pending:
        assert (status, rec) == ("overloaded", "spawn_architect")
    else:
        assert (status, rec) == base


def C(**kw: int) -> Counts:
    d = dict(pending=0, in_progress=0, active_count=1, working=0, idle=0, max_agents=4)
    d.update(kw)
    return Counts(**d)


def test_each_branch() -> None:
    assert decide(C()) == ("idle", "terminate_idle")
    assert decide(C(pending=3, active_count=3)) == ("overloaded", "spawn_developer")
    assert decide(C(pending=3, active_count=4, working=3)) == ("balanced", "maintain")
    assert decide(C(pending=1, active_count=2, working=0)) == ("overloaded", "spawn_developer")
    assert decide(C(pending=1, active_count=4, working=0, idle=2)) == (
        "underutilized",
        "terminate_idle",
    )
    assert decide(C(pending=0, in_progress=1, active_count=3, working=1, idle=1)) == (
        "underutilized",
        "terminate_idle",
    )
    assert decide(C(pending=2, in_progress=2, active_count=3, working=2)) == (
        "balanced",
        "maintain",
    )
    assert decide(C(pending=4, active_count=2, architect_only=3)) == (
        "overloaded",
        "spawn_architect",
    )
    assert decide(C(pending=4, active_count=2, architect_only=2)) == (
        "overloaded",
        "spawn_developer",
    )
