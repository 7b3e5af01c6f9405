"""The Fleet panel's one-hour sparklines over a real SQLite cluster with an injected
clock: the feed samples each snapshot it reads (one sample per 30 s bucket, from the
counts the snapshot already holds) and the panel draws pending tasks, live nodes and
throughput from them."""

from __future__ import annotations

import asyncio
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import corral
from corral.clock import FakeClock
from corral.cluster import Cluster
from corral.dashboard.feed import Feed, read_snapshot
from corral.dashboard.history import BUCKET, BUCKETS
from corral.dashboard.views import Filters, environment, render_panel
from corral.monitor import Monitor
from corral.server.app import ServerState
from corral.server.auth import Tokens
from tests.support.backends.http import TOKEN

T0 = 1_800_000_000.0  # a bucket's start: T0 % BUCKET == 0


class _Counting:
    """The cluster, counting the operations the feed calls on it."""

    def __init__(self, cluster: Cluster) -> None:
        self.unwrapped = cluster
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        value = getattr(self.unwrapped, name)
        if not callable(value) or name.startswith("_"):
            return value

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            return value(*args, **kwargs)

        return counted


@pytest.fixture
def fed(tmp_path: Path) -> Iterator[tuple[Cluster, FakeClock, Feed, _Counting]]:
    clock = FakeClock(T0)
    cluster = corral.connect(f"sqlite:///{tmp_path / 'c.db'}", clock=clock)
    assert isinstance(cluster, Cluster)
    counting = _Counting(cluster)
    st = ServerState(counting, Tokens(TOKEN))  # type: ignore[arg-type]
    try:
        yield cluster, clock, Feed(st), counting
    finally:
        st.shutdown()
        cluster.close()


def _fleet(feed: Feed) -> str:
    snap = asyncio.run(feed.current())  # no page's stream open: one read now
    return render_panel(environment(), "fleet", snap, Filters())


def _spark(html: str, name: str) -> tuple[str, str]:
    """The sparkline's path (``d``, "" when none) and the value shown beside it."""
    m = re.search(rf'<svg class="spark" data-spark="{name}".*?</svg>', html, re.S)
    assert m, f"no {name} sparkline in {html}"
    d = re.search(r' d="([^"]*)"', m.group(0))
    now = re.search(rf'data-figure="{name}_now">([^<]*)<', html)
    assert now
    return (d.group(1) if d else ""), now.group(1)


def _xs(d: str) -> list[float]:
    return [float(x) for x in re.findall(r"[ML](-?[\d.]+) ", d)]


def test_the_fleet_panel_draws_the_last_hour_from_the_feeds_samples(
    fed: tuple[Cluster, FakeClock, Feed, _Counting],
) -> None:
    cluster, clock, feed, _ = fed
    # The first read: one sample, a dot; no throughput yet (it needs a sample before).
    first = _fleet(feed)
    for name in ("pending", "live"):
        assert _spark(first, name)[0].endswith("h0")  # one sample: a dot
    assert _spark(first, "pending")[1] == "0" and _spark(first, "throughput") == ("", "—")
    assert "too few yet to draw a line" in first
    assert 'aria-label="Pending tasks, the last hour: now 0"' in first

    for i in range(3):
        cluster.register_node(f"w{i}", "developer")
    cluster.add_tasks([{"title": f"t{i}"} for i in range(10)])
    clock.advance(BUCKET)
    _fleet(feed)
    # Two done in the next 30 s: 4 per minute.
    for node in ("w0", "w1"):
        task = cluster.claim_best_task(node, "developer")
        assert task is not None
        cluster.complete_task(task.id, node, task.epoch, "ok")
    clock.advance(BUCKET)
    html = _fleet(feed)
    pending, pending_now = _spark(html, "pending")
    live, live_now = _spark(html, "live")
    rate, rate_now = _spark(html, "throughput")
    assert (pending_now, live_now, rate_now) == ("8", "3", "4.0/min")
    # Three samples in the last three buckets: the line spans the sparkline (the hour
    # drawn starts at its first sample) and ends at the right edge.
    assert _xs(pending) == [0, 120, 240]
    assert _xs(live) == _xs(pending)
    # pending went 0 -> 10 -> 8: the highest at the top of the box
    ys = [float(y) for y in re.findall(r"[ML][\d.]+ ([\d.]+)", pending)]
    assert ys[1] == 2.0 and ys[0] > ys[2] > ys[1]
    assert _xs(rate) == [120, 240]
    assert "too few yet" not in html

    # Half an hour without a read: the samples before are on the left, then a gap.
    clock.advance(BUCKET * BUCKETS / 2)
    gap = _spark(_fleet(feed), "pending")[0]
    assert gap.startswith("M0 ") and gap.count("M") == 2 and " M240 " in gap
    # An hour without a read later, the hour shown is the one new sample.
    clock.advance(BUCKET * BUCKETS)
    later = _fleet(feed)
    assert _spark(later, "pending")[0] == "M240 2 h0"  # a dot, at the top: its own max


def test_the_sparklines_cost_no_read_of_their_own(
    fed: tuple[Cluster, FakeClock, Feed, _Counting],
) -> None:
    """A feed's first read, which samples the history, calls the operations a bare
    snapshot read calls, once each, plus only ``events`` (the newest events up to the
    end the snapshot's own stats name): the samples come from the snapshot's stats."""
    cluster, clock, feed, counting = fed
    cluster.add_task("one")
    read_snapshot(counting, 0, [])  # type: ignore[arg-type]
    bare = Counter(counting.calls)
    counting.calls.clear()
    clock.advance(BUCKET)
    _fleet(feed)
    sampled = Counter(counting.calls)
    assert sampled["events"] >= 1
    assert sampled - bare == Counter({"events": sampled["events"]})
    assert bare - sampled == Counter()
    assert feed.history.trend(clock.now()).samples == 1


def test_the_fleet_panel_counts_the_last_hour_and_the_last_recovery(
    fed: tuple[Cluster, FakeClock, Feed, _Counting],
) -> None:
    """Done and failed in the last hour beside the totals (the stats' own window), and
    the last lease recovery ("none" before any)."""
    cluster, clock, feed, _ = fed
    cluster.register_node("w", "developer")
    cluster.add_tasks([{"title": f"t{i}"} for i in range(3)])
    for outcome in ("done", "failed"):
        task = cluster.claim_best_task("w", "developer")
        assert task is not None
        if outcome == "done":
            cluster.complete_task(task.id, "w", task.epoch, "ok")
        else:
            cluster.fail_task(task.id, "w", task.epoch, "broken", retry=False)
    clock.advance(2 * 3600)  # both leave the last hour
    task = cluster.claim_best_task("w", "developer")
    assert task is not None
    cluster.complete_task(task.id, "w", task.epoch, "ok")
    html = _fleet(feed)

    def figure(name: str) -> str:
        m = re.search(rf'data-figure="{name}">([^<]*)<', html)
        assert m, name
        return m.group(1)

    assert (figure("done"), figure("done_last_hour")) == ("2", "1 in the last hour")
    assert (figure("failed"), figure("failed_last_hour")) == ("1", "0 in the last hour")
    assert figure("last_recovery") == "none"

    # A silent holder's lease taken back by the monitor, 90 s before the next read.
    cluster.add_task("held by a node that goes silent")
    cluster.register_node("silent", "developer", heartbeat_interval=10)
    assert cluster.claim_best_task("silent", "developer") is not None
    clock.advance(30)
    assert "lease_recovered" in [e.kind for e in Monitor(cluster).tick(clock.now()).events]
    clock.advance(90)
    html = _fleet(feed)
    assert figure("last_recovery") == "90 s ago"
