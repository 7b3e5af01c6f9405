"""The settings are declared once (``model.Settings``); the rest is derived from it."""

from __future__ import annotations

import ast
import dataclasses
import types
import typing
from pathlib import Path

import pytest
from pydantic import ValidationError

from corral import config, defaults
from corral.model import Settings
from corral.server.models import ConfigureIn, SettingsOut

SRC = Path(__file__).resolve().parents[2] / "src" / "corral"
DECLARED = {
    f.name: t
    for f, t in zip(
        dataclasses.fields(Settings), typing.get_type_hints(Settings).values(), strict=True
    )
}


def _plain(annotation: typing.Any) -> typing.Any:
    """``X | None`` with the validators of ``Annotated[X, ...]`` taken off."""
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        plain = [
            typing.get_args(a)[0] if typing.get_origin(a) is typing.Annotated else a for a in args
        ]
        return typing.Union[tuple(plain)]  # noqa: UP007
    return annotation


def test_the_api_models_are_the_dataclass_fields() -> None:
    """SettingsOut has every setting, required, with its type; ConfigureIn has every
    setting, optional, strict, unknown keys refused."""
    assert {n: f.annotation for n, f in SettingsOut.model_fields.items()} == DECLARED
    assert all(f.is_required() for f in SettingsOut.model_fields.values())
    assert {n: _plain(f.annotation) for n, f in ConfigureIn.model_fields.items()} == {
        n: t | None for n, t in DECLARED.items()
    }
    assert not any(f.is_required() for f in ConfigureIn.model_fields.values())
    assert ConfigureIn.model_config["extra"] == "forbid"
    assert ConfigureIn.model_config["strict"] is True
    with pytest.raises(ValidationError):
        ConfigureIn.model_validate({"max_agents": "4"})
    with pytest.raises(ValidationError):
        ConfigureIn.model_validate({"max_agent": 4})


def test_the_answer_model_takes_the_defaults_as_they_are() -> None:
    assert SettingsOut.model_validate(Settings().to_dict()).model_dump() == Settings().to_dict()


def test_the_validator_knows_the_integer_settings_from_their_type() -> None:
    assert config.TYPES == DECLARED
    with pytest.raises(ValueError, match="max_attempts"):
        config.check_changes({"max_attempts": 2.5})
    assert config.check_changes({"retry_delay": 2}) == {"retry_delay": 2.0}


def test_no_other_module_lists_the_settings() -> None:
    """No second table of the settings: defaults.py keeps no copy, and no class in the
    server declares a settings field by hand."""
    assert not hasattr(defaults, "CLUSTER_SETTINGS")
    for path in (SRC / "server").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                names = {
                    s.target.id
                    for s in node.body
                    if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)
                }
                assert len(names & DECLARED.keys()) < 3, (path.name, node.name)
