"""Sparklines as server-rendered SVG: pure functions from a series to markup.

A series is a list of values at evenly spaced times, oldest first; ``None`` marks a
time with no sample (the line breaks there). The y axis runs from 0 (or the series'
lowest value, when below 0) to its highest, so a flat series of zeros lies on the
baseline and the newest value is always at the right edge. The markup carries no
``style`` attribute and no script (the dashboard's CSP allows neither): colours and
widths are SVG presentation attributes.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

__all__ = ["HEIGHT", "WIDTH", "path", "points", "sparkline"]

WIDTH = 240  # the viewBox's width and height; the page scales it
HEIGHT = 40
PAD = 2.0  # room for the stroke at the top and bottom edges


def _fmt(x: float) -> str:
    text = f"{x:.1f}"
    return text[:-2] if text.endswith(".0") else text


def points(
    values: Sequence[float | None], width: float = WIDTH, height: float = HEIGHT
) -> list[tuple[float, float] | None]:
    """Each value's (x, y) in a ``width`` × ``height`` box (y grows downwards, as
    SVG's does), or None where there is no value. The first of ``n`` values is at
    x = 0 and the last at x = ``width``; one value alone is at the right edge."""
    known = [v for v in values if v is not None]
    if not known:
        return [None] * len(values)
    low = min(0.0, min(known))
    high = max(known)
    span = high - low
    inner = height - 2 * PAD
    n = len(values)
    step = width / (n - 1) if n > 1 else 0.0
    out: list[tuple[float, float] | None] = []
    for i, v in enumerate(values):
        if v is None:
            out.append(None)
            continue
        x = i * step if n > 1 else width
        y = height - PAD - (inner * (v - low) / span if span else 0.0)
        out.append((x, y))
    return out


def path(values: Sequence[float | None], width: float = WIDTH, height: float = HEIGHT) -> str:
    """The ``d`` attribute of the series' line: ``M x y`` then ``L x y`` per value, a
    new ``M`` after each gap; a value with no neighbour is a dot (``h0``, drawn by a
    round line cap). "" for a series with no value."""
    parts: list[str] = []
    run: list[tuple[float, float]] = []

    def flush() -> None:
        if not run:
            return
        x, y = run[0]
        parts.append(f"M{_fmt(x)} {_fmt(y)}")
        if len(run) == 1:
            parts.append("h0")
        parts.extend(f"L{_fmt(x)} {_fmt(y)}" for x, y in run[1:])
        run.clear()

    for p in points(values, width, height):
        if p is None:
            flush()
        else:
            run.append(p)
    flush()
    return " ".join(parts)


def sparkline(values: Sequence[float | None], label: str, name: str = "") -> str:
    """An inline ``<svg>`` drawing the series, labelled for assistive technology
    (``role="img"``, ``aria-label`` and a ``<title>``); ``name`` goes into its
    ``data-spark`` attribute. With no value it draws only the baseline."""
    d = path(values)
    line = (
        f'<path class="spark-line" d="{d}" fill="none" stroke="currentColor" '
        'vector-effect="non-scaling-stroke" stroke-width="1.5" stroke-linecap="round" '
        'stroke-linejoin="round"/>'
        if d
        else ""
    )
    base = _fmt(HEIGHT - PAD / 2)
    return (
        f'<svg class="spark" data-spark="{escape(name)}" viewBox="0 0 {WIDTH} {HEIGHT}" '
        f'width="{WIDTH}" height="{HEIGHT}" preserveAspectRatio="none" role="img" '
        f'aria-label="{escape(label)}"><title>{escape(label)}</title>'
        f'<line x1="0" y1="{base}" x2="{WIDTH}" y2="{base}" stroke="currentColor" '
        f'stroke-opacity="0.2" stroke-width="1"/>{line}</svg>'
    )
