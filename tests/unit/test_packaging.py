"""What pyproject.toml promises: every package corral's code imports is declared
(the core's dependencies or an extra's), and the version is written in one place."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import corral

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
# what src/corral may import beyond the core
SHIPPED_EXTRAS = ("postgres", "server", "llama", "sim")
TYPING_ONLY = {"_typeshed"}  # imported under TYPE_CHECKING: the type checker's, not installed


def _name(requirement: str) -> str:
    m = re.match(r"[A-Za-z0-9._-]+", requirement)
    assert m is not None, requirement
    return re.sub(r"[-_.]+", "-", m.group(0)).lower()


def _imported_top_levels() -> set[str]:
    found: set[str] = set()
    for path in (ROOT / "src" / "corral").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.split(".")[0])
    return {m for m in found if m != "corral" and m not in sys.stdlib_module_names | TYPING_ONLY}


def test_every_imported_package_is_declared() -> None:
    """A module of corral that imports a third-party package names it in
    pyproject.toml (jsonschema was imported by corral.mcp.strict and came only
    because mcp happens to bring it)."""
    project = PYPROJECT["project"]
    declared = {_name(r) for r in project["dependencies"]}
    for extra in SHIPPED_EXTRAS:
        declared |= {_name(r) for r in project["optional-dependencies"][extra]}
    dists = importlib.metadata.packages_distributions()
    missing = {}
    for module in sorted(_imported_top_levels()):
        names = {_name(d) for d in dists.get(module, [module])}
        if not names & declared:
            missing[module] = sorted(names)
    assert missing == {}, f"imported but not declared in pyproject.toml: {missing}"


def test_the_version_is_written_once() -> None:
    """pyproject.toml takes the version from ``corral.__version__`` (hatch's dynamic
    version) instead of repeating it, and the installed metadata agrees."""
    project = PYPROJECT["project"]
    assert "version" not in project
    assert "version" in project["dynamic"]
    source = PYPROJECT["tool"]["hatch"]["version"]["path"]
    assert source == "src/corral/__init__.py"
    assert f'__version__ = "{corral.__version__}"' in (ROOT / source).read_text()
    assert importlib.metadata.version("corral") == corral.__version__


def test_the_cli_and_the_changelog_tell_the_same_version() -> None:
    """``corral --version`` reads the one place, and CHANGELOG.md's latest release
    (the first section after Unreleased) is that version: a release is tag-ready."""
    out = subprocess.run(
        [sys.executable, "-m", "corral", "--version"], capture_output=True, text=True, timeout=60
    ).stdout
    assert out.strip() == f"corral, version {corral.__version__}"
    changelog = (ROOT / "CHANGELOG.md").read_text()
    releases = re.findall(r"^## \[(\d+\.\d+\.\d+)\] - \d{4}-\d\d-\d\d$", changelog, re.M)
    assert releases and releases[0] == corral.__version__, releases
    assert changelog.index("## [Unreleased]") < changelog.index(f"## [{releases[0]}]")
