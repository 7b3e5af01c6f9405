"""Two trees side by side in ``bench/http_pace.py``: the ratio of their p50s.

``http_pace.py`` runs one tree. Comparing two (this one and an older commit's
worktree) takes rounds of each tree's own script, their order swapped from one round
to the next (the machine drifts; a fixed order puts the drift in the ratio), each
round's results in one directory as ``<name>_<round>.json``. This prints, per pause,
side and operation, the median p50 of one tree's rounds over the other's, and the same
with each round's p50 divided first by that round's floor request (the same minimal
app in both trees' rounds, so what the machine did during a round divides out).

    # rounds 1 and 3: this tree first; 2 and 4: the older tree first
    python bench/http_pace.py --pauses 1,10 --transports hand --scale 0.5 \\
        --out DIR/this_tree_1.json
    (cd /tmp/base && PYTHONPATH=src python bench/http_pace.py ... --out DIR/caeb9f8_1.json)
    python bench/pace_compare.py DIR --this this_tree --base caeb9f8
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import table

OPS = ("heartbeat", "claim", "complete", "complete_and_claim")
SIDES = ("http", "embedded")


def rounds(directory: Path, name: str) -> list[dict[str, Any]]:
    """The rounds ``name_<n>.json`` in ``directory``, in round order."""
    found = sorted(directory.glob(f"{name}_*.json"), key=lambda p: int(p.stem.rsplit("_", 1)[1]))
    if not found:
        print(f"error: {directory}: no {name}_<round>.json", file=sys.stderr)
        raise SystemExit(2)
    return [json.loads(p.read_text()) for p in found]


def ratio(
    this: list[dict[str, Any]], base: list[dict[str, Any]], pause: str, key: str, *, per_floor: bool
) -> float:
    """Median p50 of ``this``'s rounds over ``base``'s (each round's first divided by
    its floor request's when ``per_floor``)."""

    def p50(r: dict[str, Any]) -> float:
        cell = r["median"][pause]
        value = float(cell[key]["p50"])
        return value / float(cell["floor/request"]["p50"]) if per_floor else value

    return statistics.median(p50(r) for r in this) / statistics.median(p50(r) for r in base)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir", type=Path, help="the rounds' results")
    ap.add_argument("--this", default="this_tree", help="one tree's file name prefix")
    ap.add_argument("--base", default="caeb9f8", help="the other tree's")
    args = ap.parse_args()
    this, base = rounds(args.dir, args.this), rounds(args.dir, args.base)
    pauses = [p for p in this[0]["median"] if all(p in r["median"] for r in this + base)]
    rows = []
    for pause in pauses:
        for side in SIDES:
            raw = [ratio(this, base, pause, f"{side}/{op}", per_floor=False) for op in OPS]
            floor = [ratio(this, base, pause, f"{side}/{op}", per_floor=True) for op in OPS]
            rows.append([pause, side, *(f"{r:.2f}x" for r in raw), *(f"{r:.2f}x" for r in floor)])
        rows.append(
            [pause, "floor", f"{ratio(this, base, pause, 'floor/request', per_floor=False):.2f}x"]
            + [""] * (2 * len(OPS) - 1)
        )
    print(
        f"{len(this)} rounds of {args.this}, {len(base)} of {args.base}: p50 {args.this} / "
        f"{args.base} (right: per round's floor request)\n"
    )
    heads = [*OPS, *(f"{op} per floor" for op in OPS)]
    print(table(["pause ms", "side", *heads], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
