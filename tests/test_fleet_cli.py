"""`corral up`'s refusals, each one line and exit 2, before anything is written."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.fleet_up import corral_cmd, env

POOL = '[[pools]]\nid = "p"\ncmd = "true"\nrole = "developer"\n'


def up(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(corral_cmd(*args), cwd=tmp_path, env=env(), capture_output=True,
                          text=True, timeout=30)  # fmt: skip


def test_a_missing_manifest_is_named(tmp_path: Path) -> None:
    out = up(tmp_path, "up")
    assert out.returncode == 2
    assert out.stderr.strip() == "error: corral.toml: cannot read: No such file or directory"
    assert not (tmp_path / ".corral").exists()


def test_a_remote_url_is_refused_it_serves_its_own_cluster(tmp_path: Path) -> None:
    (tmp_path / "corral.toml").write_text(POOL)
    out = up(tmp_path, "--url", "http://127.0.0.1:9", "up")
    assert out.returncode == 2
    assert len(out.stderr.strip().splitlines()) == 1 and "--url" in out.stderr
    assert not (tmp_path / ".corral").exists()


def test_an_unknown_option_is_refused(tmp_path: Path) -> None:
    (tmp_path / "corral.toml").write_text(POOL)
    out = up(tmp_path, "up", "--workers", "3")
    assert out.returncode == 2 and "--workers" in out.stderr
    assert not (tmp_path / ".corral").exists()
