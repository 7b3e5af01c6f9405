"""Cluster settings: decoding what the store holds, checking what callers change."""

from __future__ import annotations

import dataclasses
import json
import typing
from collections.abc import Iterable, Mapping
from typing import Any

from corral import defaults
from corral.alerts import check_webhooks
from corral.budgets import check_budgets, check_model_caps
from corral.errors import InvalidInputError
from corral.model import Settings
from corral.validation import check_choice, check_id, check_positive, check_text

__all__ = ["FIELDS", "TYPES", "check_changes", "settings_from_rows"]

FIELDS = {f.name: f for f in dataclasses.fields(Settings)}
TYPES: dict[str, Any] = {name: typing.get_type_hints(Settings)[name] for name in FIELDS}
"""Each setting's type, from ``model.Settings`` (where the settings are declared)."""
_INTS = {name for name, t in TYPES.items() if t is int}
_TIMING = {"heartbeat_interval", "stale_threshold", "missed_beats"}
# Numbers whose default is 0 (off): 0 is accepted, as are positive numbers.
OFF_AT_ZERO = {name for name, f in FIELDS.items() if f.default == 0 and TYPES[name] is float}


def settings_from_rows(rows: Iterable[tuple[str, str]]) -> Settings:
    values = {k: json.loads(v) for k, v in rows if k in FIELDS}
    return Settings(**values)


def _check_keywords(value: Any) -> dict[str, list[str]]:
    field = "role_keywords"
    if not isinstance(value, Mapping) or not value:
        raise InvalidInputError(f"{field} must map role names to keyword lists", field=field)
    out: dict[str, list[str]] = {}
    for role, words in value.items():
        check_id(role, f"{field} role")
        if len(role.split()) != 1:  # a task lists the roles it matches space-separated
            raise InvalidInputError(
                f"{field} role names cannot contain spaces; got {role!r:.40}", field=field
            )
        if role in (defaults.MANAGER_ROLE, defaults.RUNNER_ROLE):
            raise InvalidInputError(f"{field} cannot define {role}", field=field)
        if isinstance(words, str) or not isinstance(words, list | tuple):
            raise InvalidInputError(f"{field}[{role}] must be a list of words", field=field)
        out[role] = [
            check_text(w, f"{field}[{role}]", max_len=64, allow_empty=False) for w in words
        ]
    return out


def _check_strengths(value: Any) -> list[list[str]]:
    field = "model_strengths"
    if not isinstance(value, list | tuple):
        raise InvalidInputError(f"{field} must be a list of [text, strength] pairs", field=field)
    out = []
    for pair in value:
        if not isinstance(pair, list | tuple) or len(pair) != 2:
            raise InvalidInputError(f"{field} entries must be [text, strength]", field=field)
        needle = check_text(pair[0], field, max_len=64, allow_empty=False)
        out.append([needle, check_choice(pair[1], defaults.STRENGTHS, field)])
    return out


def check_changes(changes: Mapping[str, Any]) -> dict[str, Any]:
    """Validated settings changes; raises ``InvalidInputError`` naming the bad key."""
    out: dict[str, Any] = {}
    for key, value in changes.items():
        if key not in FIELDS:
            raise InvalidInputError(
                f"unknown setting {key!r}; known: {', '.join(sorted(FIELDS))}", field=key
            )
        if key == "role_keywords":
            out[key] = _check_keywords(value)
        elif key == "model_strengths":
            out[key] = _check_strengths(value)
        elif key == "alert_webhooks":
            out[key] = check_webhooks(value, key)
        elif key == "budgets":
            out[key] = check_budgets(value, key)
        elif key == "model_caps":
            out[key] = check_model_caps(value, key)
        elif key == "stuck_action":
            out[key] = check_choice(value, defaults.STUCK_ACTIONS, key)
        elif key == "project_summary":
            out[key] = check_text(value, key, max_len=defaults.MAX_DESCRIPTION)
        elif key in OFF_AT_ZERO and value == 0 and not isinstance(value, bool):
            out[key] = 0.0
        elif key in _INTS:
            out[key] = int(check_positive(value, key, integer=True))
        else:
            out[key] = float(check_positive(value, key))
    return out


def timing_changed(changes: Mapping[str, Any]) -> bool:
    return bool(_TIMING & changes.keys())
