"""The Fleet panel's last hour: pending tasks, live nodes and throughput, kept in memory.

The store keeps no history of these counts, so the dashboard's feed keeps one: every
snapshot it reads (on events, and every ``refresh`` while a page is open) records the
counts that snapshot's ``stats`` already holds, so the history costs no read of its
own. One sample per ``BUCKET`` seconds is kept (the latest in its bucket), at most
``BUCKETS`` of them (an hour); the ring lives in the serving process and starts empty
when the server starts. A bucket in which no snapshot was read (no page open) has no
sample and the sparkline breaks there.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

__all__ = ["BUCKET", "BUCKETS", "History", "Sample", "Trend"]

BUCKET = 30.0  # seconds per sample
BUCKETS = 120  # samples kept: one hour


@dataclass(frozen=True, slots=True)
class Sample:
    bucket: int  # floor(at / BUCKET)
    at: float
    pending: int
    live: int
    done: int  # tasks done so far (the store's completions counter)


@dataclass(frozen=True, slots=True)
class Trend:
    """The last hour as three series of one value per bucket, oldest first, the last
    one the bucket of ``now``; None where no sample was taken. They start at the
    hour's first sample (a server up for ten minutes draws those ten minutes across
    the sparkline), so they hold at most ``BUCKETS`` values and none when the hour has
    no sample. ``throughput`` is tasks done per minute since the sample before (None
    where there is no sample before)."""

    pending: list[float | None]
    live: list[float | None]
    throughput: list[float | None]
    samples: int  # how many buckets hold a sample


class History:
    """A bounded ring of samples, one per bucket."""

    def __init__(self, bucket: float = BUCKET, buckets: int = BUCKETS) -> None:
        self.bucket = bucket
        self.buckets = buckets
        self._ring: deque[Sample] = deque(maxlen=buckets + 1)  # +1: the rate's base

    def record(self, at: float, pending: int, live: int, done: int) -> None:
        """Note the counts read at ``at``; a sample in the same bucket replaces the
        one before (a clock that went back is ignored)."""
        b = int(at // self.bucket)
        sample = Sample(b, at, pending, live, done)
        if self._ring and self._ring[-1].bucket >= b:
            if self._ring[-1].bucket > b:
                return
            self._ring[-1] = sample
        else:
            self._ring.append(sample)

    def trend(self, now: float) -> Trend:
        """The series over the ``buckets`` buckets up to and including ``now``'s."""
        last = int(now // self.bucket)
        first = last - self.buckets + 1
        pending: list[float | None] = [None] * self.buckets
        live: list[float | None] = [None] * self.buckets
        rate: list[float | None] = [None] * self.buckets
        before: Sample | None = None
        count = 0
        for s in self._ring:
            if first <= s.bucket <= last:
                i = s.bucket - first
                pending[i] = float(s.pending)
                live[i] = float(s.live)
                if before is not None and s.at > before.at:
                    rate[i] = max(0, s.done - before.done) * 60.0 / (s.at - before.at)
                count += 1
            before = s
        start = next((i for i, v in enumerate(pending) if v is not None), self.buckets)
        return Trend(pending[start:], live[start:], rate[start:], count)
