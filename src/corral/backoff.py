"""Capped exponential backoff with jitter: one pure function for every retry loop.

``delay(attempt)`` is ``base * factor**attempt`` capped at ``cap``, then scaled by a
jitter factor drawn from ``[1 - jitter, 1]`` ("equal jitter" when ``jitter`` is 0.5,
none when 0). ``rand`` is injected so a caller (or a test) decides where randomness
comes from; the default draws from ``random.random``.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass

from corral.defaults import RETRY_BACKOFF_CAP
from corral.errors import InvalidInputError

__all__ = ["Backoff", "delay", "retry_ready_at"]


def delay(
    attempt: int,
    *,
    base: float,
    cap: float,
    factor: float = 2.0,
    jitter: float = 0.0,
    rand: Callable[[], float] = random.random,
) -> float:
    """Seconds to wait before retry number ``attempt`` (0 for the first retry)."""
    if attempt < 0:
        raise InvalidInputError("attempt must be at least 0", field="attempt")
    if not (base >= 0 and cap >= 0 and factor >= 1 and 0 <= jitter <= 1):
        raise InvalidInputError(
            "need base >= 0, cap >= 0, factor >= 1 and 0 <= jitter <= 1", field="backoff"
        )
    if base == 0 or cap == 0:
        raw = 0.0
    elif factor > 1 and attempt * math.log(factor) >= math.log(cap / base):
        raw = cap  # base * factor**attempt would pass the cap (or overflow)
    else:
        raw = min(base * factor**attempt, cap)
    if jitter:
        raw *= 1.0 - jitter * rand()
    return raw


@dataclass(slots=True)
class Backoff:
    """A loop's retry state: ``next()`` gives the next delay, ``reset()`` after a
    success. Pure apart from ``rand``."""

    base: float
    cap: float
    factor: float = 2.0
    jitter: float = 0.0
    attempt: int = 0
    rand: Callable[[], float] = random.random

    def next(self) -> float:
        d = delay(
            self.attempt,
            base=self.base,
            cap=self.cap,
            factor=self.factor,
            jitter=self.jitter,
            rand=self.rand,
        )
        self.attempt += 1
        return d

    def reset(self) -> None:
        self.attempt = 0


def retry_ready_at(
    retry_backoff: float | None, attempt: int, now: float, *, cap: float = RETRY_BACKOFF_CAP
) -> float | None:
    """When a task whose attempt number ``attempt`` (1 for the first) failed at ``now``
    may be claimed again: ``now + retry_backoff * 2**(attempt - 1)``, the wait capped at
    ``cap`` seconds; None when it may be claimed at once (no ``retry_backoff``)."""
    if not retry_backoff:
        return None
    return now + delay(max(attempt - 1, 0), base=retry_backoff, cap=max(cap, retry_backoff))
