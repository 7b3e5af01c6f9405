"""The cluster's copy of a run's stderr tail (``corral.supervisor.link.cluster_tail``):
the last 50 lines, each cut to 300 characters, and never more JSON than the cluster's
payload limit takes, whatever the text."""

from __future__ import annotations

import json

from corral import defaults
from corral.supervisor.link import cluster_tail


def test_the_last_50_lines_each_cut_to_300_characters() -> None:
    lines = [f"line {i} " + "x" * 400 for i in range(80)]
    tail = cluster_tail(lines)
    assert len(tail) == 50
    assert [t[: len(f"line {i} ")] for i, t in zip(range(30, 80), tail, strict=True)] == [
        f"line {i} " for i in range(30, 80)
    ]
    assert {len(t) for t in tail} == {300}
    assert cluster_tail(["only", "two"]) == ["only", "two"] and cluster_tail([]) == []


def test_escaped_text_keeps_the_newest_lines_within_the_payload_limit() -> None:
    """300 characters that JSON escapes (``\\uXXXX``, 6 bytes each) on 50 lines would
    be 90 KB: older lines go until the tail is within 32 KiB, the newest kept."""
    lines = [f"{i:03d}" + "\u00e9" * 297 for i in range(50)]
    tail = cluster_tail(lines)
    size = len(json.dumps(tail))
    assert size <= 32 * 1024 < defaults.MAX_PAYLOAD_BYTES
    assert 0 < len(tail) < 50 and tail == [t[:300] for t in lines[-len(tail) :]]
    assert len(json.dumps(lines[-len(tail) - 1 :])) > 32 * 1024  # one older is too many
