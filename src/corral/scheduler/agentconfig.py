"""An agent's activation config: what it cares about, its daily caps, its discovery
preferences and its optional cron overrides, checked field by field.

The keys are the agent config file's (``agent-artifacts/<name>/config.yaml``): every
one optional, unknown keys refused, each error naming its field (``discovery.
min_confidence``, ``schedule_override[0].cron``)."""

from __future__ import annotations

from typing import Any

from corral.errors import InvalidInputError
from corral.scheduler.cron import check_cron, check_tz
from corral.validation import MAX_INT, check_id, check_payload, check_text

__all__ = ["check_config", "overrides"]

_LISTS = ("interests", "watch_communities")
_COUNTS = ("max_daily_posts", "max_daily_comments")
_DISCOVERY_BOOLS = ("respond_to_questions", "respond_to_discussions")
_KEYS = frozenset(
    {
        "name",
        "type",
        "model",
        "can_create_posts",
        "discovery",
        "schedule_override",
        "min_activation_interval",
        "extra",
        *_LISTS,
        *_COUNTS,
    }
)
_ENTRY_KEYS = frozenset({"cron", "task", "tz"})
MAX_OVERRIDES = 32


def _bad(field: str, msg: str) -> InvalidInputError:
    return InvalidInputError(f"{field} {msg}", field=field)


def _words(value: Any, field: str) -> list[str]:
    if not isinstance(value, list) or len(value) > 100:
        raise _bad(field, "must be a list of at most 100 strings")
    return [check_text(v, field, max_len=200, allow_empty=False) for v in value]


def _count(value: Any, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_INT:
        raise _bad(field, "must be a non-negative integer")
    return value


def _discovery(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _bad("discovery", "must be an object")
    unknown = set(value) - {*_DISCOVERY_BOOLS, "min_confidence"}
    if unknown:
        raise _bad("discovery", f"has unknown keys {sorted(unknown)}")
    out: dict[str, Any] = {}
    for key in _DISCOVERY_BOOLS:
        if key in value:
            if not isinstance(value[key], bool):
                raise _bad(f"discovery.{key}", "must be true or false")
            out[key] = value[key]
    if "min_confidence" in value:
        c = value["min_confidence"]
        if isinstance(c, bool) or not isinstance(c, int | float) or not 0 <= c <= 1:
            raise _bad("discovery.min_confidence", "must be a number from 0 to 1")
        out["min_confidence"] = float(c)
    return out


def _overrides(value: Any) -> list[dict[str, str]]:
    if not isinstance(value, list) or len(value) > MAX_OVERRIDES:
        raise _bad("schedule_override", f"must be a list of at most {MAX_OVERRIDES} entries")
    out = []
    for i, entry in enumerate(value):
        where = f"schedule_override[{i}]"
        if not isinstance(entry, dict):
            raise _bad(where, "must be an object with cron and task")
        unknown = set(entry) - _ENTRY_KEYS
        if unknown:
            raise _bad(where, f"has unknown keys {sorted(unknown)}")
        if "cron" not in entry:
            raise _bad(f"{where}.cron", "is missing")
        item = {
            "cron": check_cron(entry["cron"], f"{where}.cron"),
            "task": check_id(entry.get("task", "scheduled"), f"{where}.task"),
            "tz": check_tz(entry.get("tz", "UTC"), f"{where}.tz"),
        }
        out.append(item)
    return out


def check_config(config: Any) -> dict[str, Any]:
    """The config, checked and normalised; ``InvalidInputError`` naming the field."""
    if not isinstance(config, dict):
        raise InvalidInputError("config must be an object", field="config")
    unknown = set(config) - _KEYS
    if unknown:
        raise _bad("config", f"has unknown keys {sorted(unknown)}; known: {sorted(_KEYS)}")
    out: dict[str, Any] = {}
    for key in ("name", "type", "model"):
        if key in config:
            out[key] = check_text(config[key], key, max_len=200, allow_empty=False)
    for key in _LISTS:
        if key in config:
            out[key] = _words(config[key], key)
    if "can_create_posts" in config:
        if not isinstance(config["can_create_posts"], bool):
            raise _bad("can_create_posts", "must be true or false")
        out["can_create_posts"] = config["can_create_posts"]
    for key in _COUNTS:
        if key in config and config[key] is not None:
            out[key] = _count(config[key], key)
    if "discovery" in config:
        out["discovery"] = _discovery(config["discovery"])
    if "schedule_override" in config:
        out["schedule_override"] = _overrides(config["schedule_override"])
    if config.get("min_activation_interval") is not None:
        v = config["min_activation_interval"]
        if isinstance(v, bool) or not isinstance(v, int | float) or not 0 <= v <= 1e9:
            raise _bad("min_activation_interval", "must be a number of seconds (0 or more)")
        out["min_activation_interval"] = float(v)
    if "extra" in config:
        if not isinstance(config["extra"], dict):
            raise _bad("extra", "must be an object")
        out["extra"] = check_payload(config["extra"], "extra")
    check_payload(out, "config")
    return out


def overrides(config: dict[str, Any]) -> list[dict[str, str]]:
    """The config's cron overrides (checked by ``check_config``)."""
    return list(config.get("schedule_override", ()))
