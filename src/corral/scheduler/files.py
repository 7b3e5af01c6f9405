"""Agent config files: ``DIR/<name>/config.yaml`` (or ``config.toml``, ``config.json``)
per agent, read and checked before anything is added.

YAML needs PyYAML, which corral does not depend on: without it a ``config.yaml`` is
refused with a message saying so (TOML and JSON need nothing beyond Python)."""

from __future__ import annotations

import importlib
import json
import tomllib
from pathlib import Path
from typing import Any

from corral.errors import InvalidInputError
from corral.scheduler.agentconfig import check_config
from corral.validation import check_id

__all__ = ["CONFIG_NAMES", "load_dir", "read_config"]

CONFIG_NAMES = ("config.yaml", "config.yml", "config.toml", "config.json")


def _bad(path: Path, msg: str) -> InvalidInputError:
    """An error whose field is the file (``error: PATH: what is wrong`` on the CLI);
    ``msg`` names the bad key."""
    return InvalidInputError(msg, field=str(path))


def read_config(path: Path) -> dict[str, Any]:
    """One file's config, parsed (not yet checked)."""
    text = path.read_text(encoding="utf-8")
    try:
        if path.suffix in (".yaml", ".yml"):
            try:
                yaml: Any = importlib.import_module("yaml")
            except ImportError:
                raise _bad(
                    path,
                    "reading YAML needs PyYAML (pip install pyyaml);"
                    " or write config.toml or config.json",
                ) from None
            data = yaml.safe_load(text)
        elif path.suffix == ".toml":
            data = tomllib.loads(text)
        else:
            data = json.loads(text)
    except InvalidInputError:
        raise
    except Exception as exc:  # each parser's own error class
        raise _bad(path, f"cannot parse: {str(exc).splitlines()[0][:200]}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise _bad(path, "must hold a mapping of settings")
    return data


def load_dir(root: Path) -> list[tuple[str, dict[str, Any]]]:
    """``(agent_id, checked config)`` for every agent directory under ``root``, by
    name; the first bad file raises ``InvalidInputError`` naming it and its field."""
    if not root.is_dir():
        raise InvalidInputError(f"{root} is not a directory", field="dir")
    out = []
    for sub in sorted(p for p in root.iterdir() if p.is_dir()):
        found = [sub / n for n in CONFIG_NAMES if (sub / n).is_file()]
        if not found:
            continue
        if len(found) > 1:
            raise _bad(sub, f"has several configs ({', '.join(p.name for p in found)})")
        path = found[0]
        raw = read_config(path)
        try:
            config = check_config(raw)
            agent_id = check_id(config.get("name", sub.name), "name")
        except InvalidInputError as exc:
            raise _bad(path, exc.message) from None
        if "name" in config and config["name"] != sub.name:
            raise _bad(path, f"name is {config['name']!r} but the directory is {sub.name!r}")
        out.append((agent_id, config))
    if not out:
        raise InvalidInputError(
            f"no agent configs under {root} (expected {root}/<name>/config.yaml)", field="dir"
        )
    return out
