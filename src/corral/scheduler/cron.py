"""Cron expressions for an agent's ``schedule_override`` entries, over ``cronsim``.

``cronsim`` takes the five classic fields; the ``@daily``-style aliases are mapped
here. A time zone (IANA name, UTC by default) says whose wall clock the fields
read; across a daylight-saving change a fire time in the repeated hour fires once.
"""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from corral.errors import InvalidInputError

__all__ = ["ALIASES", "check_cron", "check_tz", "next_fire"]

ALIASES: dict[str, str] = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}


def _expand(expr: str) -> str:
    return ALIASES.get(expr.strip().lower(), expr.strip())


def check_cron(expr: object, field: str = "cron") -> str:
    """``expr`` if it is a valid five-field expression or alias; else
    ``InvalidInputError`` naming ``field``."""
    if not isinstance(expr, str) or not expr.strip() or len(expr) > 200:
        raise InvalidInputError(
            f"{field} must be a cron expression such as '0 9 * * *'", field=field
        )
    try:
        CronSim(_expand(expr), datetime(2000, 1, 1, tzinfo=UTC))
    except CronSimError as exc:
        raise InvalidInputError(
            f"{field} {expr!r:.60} is not a cron expression: {exc}", field=field
        ) from None
    return expr.strip()


def check_tz(name: object, field: str = "tz") -> str:
    """An IANA time zone name (``Europe/Paris``, ``UTC``)."""
    if not isinstance(name, str) or not name:
        raise InvalidInputError(f"{field} must be a time zone name such as 'UTC'", field=field)
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidInputError(
            f"{field} {name!r:.60} is not a known time zone", field=field
        ) from None
    return name


def next_fire(expr: str, after: float, tz: str = "UTC") -> float:
    """The first time strictly after ``after`` (unix seconds) that ``expr`` fires,
    read on ``tz``'s wall clock."""
    start = datetime.fromtimestamp(after, ZoneInfo(tz))
    return next(CronSim(_expand(expr), start)).timestamp()
