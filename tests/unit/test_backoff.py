"""backoff.delay: capped, doubling, jittered within its bounds."""

from __future__ import annotations

from typing import TypedDict

import pytest
from hypothesis import given
from hypothesis import strategies as st

from corral.backoff import Backoff, delay


class _Bounds(TypedDict, total=False):
    """``delay``'s keyword bounds, as the bad cases give them."""

    base: float
    cap: float
    factor: float
    jitter: float


def test_doubles_until_the_cap() -> None:
    got = [delay(a, base=0.1, cap=1.0) for a in range(6)]
    assert got == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.0, 1.0])


def test_huge_attempt_stays_at_the_cap_without_overflow() -> None:
    assert delay(10_000, base=0.1, cap=5.0) == 5.0


@given(
    attempt=st.integers(0, 200),
    base=st.floats(0.001, 10),
    cap=st.floats(0.001, 100),
    jitter=st.floats(0, 1),
    r=st.floats(0, 0.999999),
)
def test_jitter_scales_within_one_minus_jitter_and_one(
    attempt: int, base: float, cap: float, jitter: float, r: float
) -> None:
    plain = delay(attempt, base=base, cap=cap)
    jittered = delay(attempt, base=base, cap=cap, jitter=jitter, rand=lambda: r)
    assert plain <= cap
    assert plain * (1 - jitter) - 1e-12 <= jittered <= plain + 1e-12


def test_backoff_state_resets_after_success() -> None:
    b = Backoff(base=1.0, cap=8.0)
    assert [b.next() for _ in range(5)] == [1.0, 2.0, 4.0, 8.0, 8.0]
    b.reset()
    assert b.next() == 1.0


@pytest.mark.parametrize(
    "kwargs",
    [
        {"base": -1, "cap": 1},
        {"base": 1, "cap": 1, "factor": 0.5},
        {"base": 1, "cap": 1, "jitter": 2},
    ],
)
def test_bad_parameters_are_refused(kwargs: _Bounds) -> None:
    with pytest.raises(ValueError):
        delay(0, **kwargs)


def test_no_retry_loop_outside_backoff_draws_its_own_jitter_or_doubles_a_delay() -> None:
    """Each rule once: a module other than ``corral.backoff`` neither calls
    ``random.*`` (a ``rand`` default passed on to backoff is a reference, not a call)
    nor doubles a variable it sleeps on (``x *= 2`` / ``x = x * 2``)."""
    import ast
    from pathlib import Path

    src = Path(__file__).parents[2] / "src" / "corral"
    found: list[str] = []
    for path in sorted(src.rglob("*.py")):
        if path.name == "backoff.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            where = f"{path.relative_to(src)}:{getattr(node, 'lineno', 0)}"
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "random"
            ):
                found.append(f"{where} random.{node.func.attr}()")
            if (
                isinstance(node, ast.AugAssign)
                and isinstance(node.op, ast.Mult)
                and isinstance(node.value, ast.Constant)
                and node.value.value == 2
            ):
                found.append(f"{where} *= 2")
    assert not found, found
