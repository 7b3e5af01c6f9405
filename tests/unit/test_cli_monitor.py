"""``corral monitor -v`` logs a pass when it says something new: it did something,
its assessment changed, its next deadline is new (sooner, or the last one passed),
or it gained or lost the lead; not every wake-up (a line every 0.5 s said "next due
in 23.2 s"). Timing by an injected clock: the passes and their ``now`` are data."""

from __future__ import annotations

from typing import Any

from corral.cli.core import PassFilter
from corral.model import Assessment, Event
from corral.monitor import TickResult

T0 = 1_700_000_000.0


def _assessment(status: str, rec: str) -> Assessment:
    fields: dict[str, Any] = dict.fromkeys(Assessment.__dataclass_fields__, 0)
    fields.update(status=status, recommendation=rec)
    return Assessment(**fields)


def test_a_wake_that_finds_nothing_new_is_not_logged() -> None:
    f = PassFilter()
    assert f.worth(TickResult(next_deadline=T0 + 23.7), T0)  # the first pass: logged
    # woken every 0.5 s by heartbeats: nothing done, the same deadline or a later one
    quiet = [
        f.worth(TickResult(next_deadline=T0 + 23.7 + i * 0.1), T0 + i * 0.5) for i in range(1, 40)
    ]
    assert quiet == [False] * 39


def test_what_makes_a_pass_worth_a_line() -> None:
    f = PassFilter()
    f.worth(TickResult(next_deadline=T0 + 30), T0)
    e = Event(seq=1, ts=T0 + 1, kind="lease_recovered", node_id="A", task_id=1, data={})
    assert f.worth(TickResult(events=[e], next_deadline=T0 + 30), T0 + 1)  # did something
    assert not f.worth(TickResult(next_deadline=T0 + 30), T0 + 2)
    assert f.worth(TickResult(next_deadline=T0 + 10), T0 + 3)  # a new duty, sooner
    assert not f.worth(TickResult(next_deadline=T0 + 40), T0 + 4)  # pushed later: no news
    assert f.worth(TickResult(next_deadline=T0 + 40), T0 + 10)  # the logged one passed
    busy = _assessment("overloaded", "spawn_developer")
    assert f.worth(TickResult(assessment=busy, next_deadline=T0 + 40), T0 + 11)
    assert not f.worth(TickResult(assessment=busy, next_deadline=T0 + 40), T0 + 12)
    calm = _assessment("balanced", "maintain")
    assert f.worth(TickResult(assessment=calm, next_deadline=T0 + 40), T0 + 13)
    assert f.worth(TickResult(next_deadline=None), T0 + 14)  # nothing due any more
    assert not f.worth(TickResult(next_deadline=None), T0 + 15)


def test_a_follower_says_so_once_and_a_new_leader_says_so_again() -> None:
    f = PassFilter()
    follow = [f.worth(TickResult(leader=False, next_deadline=T0 + i + 1), T0 + i) for i in range(5)]
    assert follow == [True, False, False, False, False]
    assert f.worth(TickResult(next_deadline=T0 + 60), T0 + 6)  # leads now
    assert f.worth(TickResult(leader=False, next_deadline=T0 + 8), T0 + 7)  # lost it
