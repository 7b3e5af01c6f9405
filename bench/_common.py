"""Helpers shared by the bench scripts: machine facts, percentiles, tables, JSON.

Bench scripts run as ``python bench/NAME.py``; this module sits next to them.
"""

from __future__ import annotations

import json
import math
import os
import platform
import sqlite3
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "RESULTS_DIR",
    "machine_info",
    "percentiles",
    "table",
    "write_json",
]

RESULTS_DIR = Path(__file__).resolve().parent / "results"
REPO = Path(__file__).resolve().parent.parent


def _cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def _git_commit() -> str | None:
    try:
        out = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        )
        dirty = subprocess.run(
            ["git", "-C", str(REPO), "status", "--porcelain", "--", "src"],
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() + ("+dirty-src" if dirty.stdout.strip() else "")


def machine_info() -> dict[str, Any]:
    """What the numbers were measured on: cores, CPU, Python, SQLite, load, commit."""
    usable: int | None
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        usable = os.cpu_count()
    return {
        "cores": os.cpu_count(),
        "usable_cores": usable,
        "cpu": _cpu_model(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "sqlite": sqlite3.sqlite_version,
        "loadavg": list(os.getloadavg()),
        "git_commit": _git_commit(),
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def percentiles(samples: Sequence[float]) -> dict[str, float]:
    """p50, p90, p99, max and mean (nearest-rank percentiles) of ``samples``."""
    s = sorted(samples)
    n = len(s)
    if n == 0:
        return {"n": 0}

    def rank(p: float) -> float:
        return s[min(n, max(1, math.ceil(p / 100 * n))) - 1]

    return {
        "n": n,
        "p50": rank(50),
        "p90": rank(90),
        "p99": rank(99),
        "max": s[-1],
        "mean": sum(s) / n,
    }


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A Markdown table (also readable on a terminal)."""
    cells = [[str(h) for h in headers], *[[_fmt(c) for c in row] for row in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = [
        "| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |" for r in cells
    ]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        if value >= 100:
            return f"{value:,.0f}"
        return f"{value:.2f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return "—" if value is None else str(value)


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Write ``data`` to ``path`` (atomically), creating the directory."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n")
    tmp.replace(path)
