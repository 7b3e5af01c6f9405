"""The Fleet panel's sparklines: the SVG path of a series (corral.dashboard.svg) and the
feed's one-hour ring of samples (corral.dashboard.history), both pure."""

from __future__ import annotations

import re
from html.parser import HTMLParser

from corral.dashboard import svg
from corral.dashboard.history import BUCKET, BUCKETS, History
from corral.dashboard.views import sparklines

W, H, P = svg.WIDTH, svg.HEIGHT, svg.PAD


def _coords(d: str) -> list[tuple[float, float]]:
    return [(float(x), float(y)) for x, y in re.findall(r"[ML](-?[\d.]+) (-?[\d.]+)", d)]


# --- the path --------------------------------------------------------------------------
def test_a_series_runs_from_the_left_edge_to_the_right_one_scaled_from_zero() -> None:
    d = svg.path([0, 5, 10])
    assert d == f"M0 {H - P:g} L120 {H / 2:g} L240 {P:g}"
    # the highest value touches the top (inside the padding), 0 the bottom; the path
    # rounds each coordinate to a tenth
    assert svg.points([3, 7, 1, 7]) == [
        (0, H - P - (H - 2 * P) * 3 / 7),
        (80, P),
        (160, H - P - (H - 2 * P) * 1 / 7),
        (240, P),
    ]


def test_the_scale_starts_at_zero_not_at_the_lowest_value() -> None:
    """100 and 101 are nearly the same height: a sparkline does not magnify noise."""
    (_, y0), (_, y1) = _coords(svg.path([100, 101]))
    assert y1 == P and abs(y0 - y1) < 1


def test_a_series_below_zero_is_scaled_from_its_lowest_value() -> None:
    assert _coords(svg.path([-2, 2])) == [(0, H - P), (240, P)]


def test_a_flat_series_lies_on_the_baseline() -> None:
    assert svg.path([0, 0, 0]) == f"M0 {H - P:g} L120 {H - P:g} L240 {H - P:g}"
    # a flat non-zero series is at its top (0 is the bottom)
    assert {y for _, y in _coords(svg.path([4, 4]))} == {P}


def test_an_empty_series_has_no_path_and_draws_only_the_baseline() -> None:
    assert svg.path([]) == ""
    assert svg.path([None, None]) == ""
    assert svg.points([None, None]) == [None, None]
    markup = svg.sparkline([], "Pending tasks")
    assert "<path" not in markup and "<line" in markup


def test_one_point_is_a_dot_at_the_right_edge() -> None:
    assert svg.path([7]) == f"M240 {P:g} h0"


def test_a_gap_breaks_the_line_and_a_lone_value_is_a_dot() -> None:
    d = svg.path([1, 1, None, 1, None, None, 1, 1])
    step = W / 7
    moves = re.findall(r"M([\d.]+)", d)
    assert [float(x) for x in moves] == [0, round(3 * step, 1), round(6 * step, 1)]
    assert d.count("h0") == 1  # the value at index 3 has no neighbour


def test_the_box_is_scaled_to_the_size_asked() -> None:
    assert _coords(svg.path([0, 1], width=100, height=20)) == [(0, 20 - P), (100, P)]


def test_the_markup_is_labelled_escaped_and_has_no_style_or_script() -> None:
    markup = svg.sparkline([1, 2], 'Live <nodes> & "more"', name="live")
    tags: list[tuple[str, dict[str, str | None]]] = []

    class Tags(HTMLParser):
        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            tags.append((tag, dict(attrs)))

    Tags().feed(markup)
    root = tags[0][1]
    assert tags[0][0] == "svg" and root["role"] == "img"
    assert root["aria-label"] == 'Live <nodes> & "more"' and root["data-spark"] == "live"
    assert "<title>Live &lt;nodes&gt; &amp; &quot;more&quot;</title>" in markup
    assert not any("style" in a or any(k.startswith("on") for k in a) for _, a in tags)
    assert "script" not in markup and "http" not in markup


# --- the ring --------------------------------------------------------------------------
def test_the_ring_keeps_one_sample_per_bucket_the_latest() -> None:
    h = History()
    h.record(0.0, pending=5, live=1, done=0)
    h.record(10.0, pending=6, live=2, done=0)  # same bucket: replaces
    h.record(BUCKET, pending=7, live=2, done=3)
    t = h.trend(BUCKET)
    assert t.samples == 2
    assert t.pending == [6.0, 7.0] and t.live == [2.0, 2.0]


def test_the_series_start_at_the_hours_first_sample_and_end_at_now() -> None:
    """A young server's samples span the sparkline; buckets after the last sample,
    up to now's, have none."""
    h = History()
    h.record(10 * BUCKET, 1, 1, 0)
    h.record(12 * BUCKET, 2, 1, 0)
    t = h.trend(14 * BUCKET + 1)
    assert t.pending == [1.0, None, 2.0, None, None]
    assert len(t.live) == len(t.throughput) == 5


def test_throughput_is_tasks_done_per_minute_since_the_sample_before() -> None:
    h = History()
    h.record(0.0, 0, 1, done=10)
    h.record(30.0, 0, 1, done=25)  # 15 in 30 s
    h.record(90.0, 0, 1, done=25)  # none in the next minute (a bucket without a sample)
    h.record(120.0, 0, 1, done=20)  # done went down (tasks purged): 0, not negative
    t = h.trend(120.0)
    assert t.throughput == [None, 30.0, None, 0.0, 0.0]
    assert t.pending[-3] is None  # no sample in the bucket of 60 s: a gap


def test_the_ring_is_bounded_to_an_hour_and_follows_now() -> None:
    h = History()
    for i in range(3 * BUCKETS):
        h.record(i * BUCKET, pending=i, live=1, done=i)
    t = h.trend((3 * BUCKETS - 1) * BUCKET)
    assert t.samples == BUCKETS
    assert t.pending[0] == 2 * BUCKETS and t.pending[-1] == 3 * BUCKETS - 1
    # the oldest kept sample's rate has the one before it as its base
    assert t.throughput == [2.0] * BUCKETS
    assert len(h._ring) == BUCKETS + 1
    # an hour later with nothing recorded, the last hour is empty
    later = h.trend((4 * BUCKETS) * BUCKET)
    assert later.samples == 0 and later.pending == later.live == later.throughput == []


def test_a_sample_from_an_earlier_bucket_than_the_last_is_ignored() -> None:
    h = History()
    h.record(100.0, 3, 1, 0)
    h.record(10.0, 9, 9, 9)  # a clock that went back
    assert h.trend(100.0).pending[-1] == 3.0 and h.trend(100.0).samples == 1


def test_the_panel_rows_show_the_newest_value_of_each_series() -> None:
    h = History()
    h.record(0.0, 100_000, 1000, 0)
    h.record(30.0, 99_990, 999, 10)
    rows = {r["name"]: r for r in sparklines(h.trend(30.0))}
    assert [rows[n]["newest"] for n in ("pending", "live", "throughput")] == [
        "99990",
        "999",
        "20.0/min",
    ]
    assert 'aria-label="Pending tasks, the last hour: now 99990"' in rows["pending"]["svg"]
    empty = sparklines(None)
    assert [r["newest"] for r in empty] == ["—", "—", "—"]
    assert all("<path" not in r["svg"] for r in empty)
