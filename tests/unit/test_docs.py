"""The user docs, the code's docstrings and the messages describe the behaviour
itself: none sends a reader to a source document the repository does not contain."""

from __future__ import annotations

import json
from pathlib import Path

import corral
from corral.server.openapi import build_openapi
from corral.server.routes import OPS

ROOT = Path(__file__).resolve().parents[2]

# The documents corral was specified from, and a step of one; none is in the
# repository. Matched without regard to case, but "STEP 1.5" exactly (a speed-up
# "1.5-1.8x" is no citation).
ABSENT = (
    "anti-idle",
    "heartbeat-protocol",
    "process-supervision",
    "staleness-scheduling",
    "idle-workflows",
    "STEP 1.5",
    "DESIGN.md",
)


def _names(absent: str, text: str) -> bool:
    if absent.isupper() or " " in absent:
        return absent in text
    return absent.lower() in text.lower()


def _texts() -> dict[str, str]:
    files = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*"))]
    files += sorted((ROOT / "src" / "corral").rglob("*"))
    return {
        str(f.relative_to(ROOT)): f.read_text(encoding="utf-8", errors="replace")
        for f in files
        if f.is_file() and "__pycache__" not in f.parts
    }


def test_the_scan_covers_the_docs_and_the_source() -> None:
    names = _texts()
    assert "README.md" in names
    assert "docs/core.md" in names
    assert "src/corral/scoring.py" in names
    assert "src/corral/store/sql/sqlite/schema.sql" in names
    assert any(n.startswith("src/corral/supervisor/") for n in names)


def test_no_doc_or_source_file_names_a_document_the_repository_lacks() -> None:
    for absent in ABSENT:
        assert not (ROOT / absent).exists()
    found = [
        f"{name}:{n}: {absent}"
        for name, text in _texts().items()
        for n, line in enumerate(text.splitlines(), 1)
        for absent in ABSENT
        if _names(absent, line)
    ]
    assert found == []


def test_the_openapi_document_names_none_either() -> None:
    """The models' field descriptions reach the served OpenAPI document."""
    text = json.dumps(build_openapi(OPS, version=corral.__version__), ensure_ascii=False)
    assert "registered as developer" in text
    for absent in ABSENT:
        assert not _names(absent, text), absent


def _layout() -> str:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Layout", 1)[1]
    return section.split("```", 2)[1]


def test_the_readme_layout_is_the_map_of_the_tree() -> None:
    """Every module and package of ``src/corral`` and of ``corral.store``, and every
    top-level folder of the repository, is named in README's Layout section; every
    ``name.py`` or ``name/`` it names exists."""
    import re

    layout = _layout()
    words = set(re.findall(r"[\w.]+/?", layout))
    pkg = ROOT / "src" / "corral"
    wanted: list[str] = []
    for folder in (pkg, pkg / "store"):
        for entry in sorted(folder.iterdir()):
            if entry.name in {"__init__.py", "__main__.py", "py.typed", "__pycache__"}:
                continue
            wanted.append(entry.name + ("/" if entry.is_dir() else ""))
    for entry in sorted(ROOT.iterdir()):
        if entry.is_dir() and not entry.name.startswith(".") and entry.name != "src":
            wanted.append(entry.name + "/")
    missing = [w for w in wanted if w not in words]
    assert missing == [], f"README's Layout does not name {missing}"
    everything = {p.name for p in ROOT.rglob("*") if ".venv" not in p.parts}
    stale = sorted(
        w
        for w in words
        if (w.endswith(".py") or w.endswith("/"))
        and w.rstrip("/").rsplit("/", 1)[-1] not in everything
    )
    assert stale == [], f"README's Layout names what is not in the tree: {stale}"


def test_the_readme_test_command_is_what_ci_runs() -> None:
    """README's test command is one line, and ``.ci/run`` ends by running exactly it;
    the script it names is executable and installs the extras, promtool and strace,
    and starts PostgreSQL when it is not running."""
    import os
    import re

    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```bash\n(.*?)```", readme, re.S)
    command = next(b.strip() for b in blocks if "scripts/test" in b)
    assert "\n" not in command
    ci = [line for line in (ROOT / ".ci" / "run").read_text().splitlines() if line.strip()]
    assert ci[-1].strip() == command
    script = ROOT / command.split()[0]
    assert os.access(script, os.X_OK)
    text = script.read_text()
    for needed in ("pg_isready", "pg_ctlcluster", "prometheus", "strace", ".[all,test]"):
        assert needed in text, needed
    first = next(b.strip() for b in blocks)
    # command 1: the main job (tests/integration/test_fleet_up.py runs the example)
    assert first.endswith("corral up examples/fleet.toml"), first
