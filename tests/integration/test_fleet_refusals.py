"""A fleet that can never run is refused by ``corral up`` before anything starts:
exit 2 and one line naming the manifest, the pool and the field (a pool of role
``chef`` started and its members crash-looped on ``role must be one of``)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.support.fleet_up import copy_example, corral_cmd, env


def _up(directory: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        corral_cmd("up", "fleet.toml", "--port", "0"),
        cwd=directory,
        env=env(),
        capture_output=True,
        text=True,
        timeout=30,
    )


def _edit(directory: Path, old: str, new: str) -> None:
    p = directory / "fleet.toml"
    text = p.read_text()
    assert old in text
    p.write_text(text.replace(old, new, 1))


def test_a_pool_of_a_role_the_cluster_refuses_exits_2_before_anything_starts(
    tmp_path: Path,
) -> None:
    copy_example(tmp_path)
    _edit(tmp_path, 'role = "developer"', 'role = "chef"')
    out = _up(tmp_path)
    assert out.returncode == 2, out.stderr
    err = out.stderr.strip().splitlines()
    assert len(err) == 1, out.stderr
    assert "fleet.toml: pool worker: role: chef: not a role of the cluster" in err[0]
    assert "developer" in err[0]  # the roles it could be
    assert out.stdout == ""  # no banner: nothing was started
    assert not (tmp_path / ".corral" / "supervisor").exists()


def test_a_role_the_manifests_own_settings_add_is_accepted_at_load(tmp_path: Path) -> None:
    """The roles are the cluster's with the manifest's ``role_keywords`` applied: a
    pool of a role the manifest adds passes the check (and starts)."""
    from corral.fleet.manifest import check_roles, load_fleet
    from corral.model import Settings

    copy_example(tmp_path)
    _edit(tmp_path, 'role = "developer"', 'role = "chef"')
    fleet = load_fleet(tmp_path / "fleet.toml")
    check_roles(fleet, Settings(role_keywords={"chef": ["cook"]}).roles)


@pytest.mark.parametrize(
    ("old", "new", "field"),
    [
        ('cmd = "python3"', 'cmd = "no-such-python-here"', "pool worker: cmd: "),
        ('cwd = "."', 'cwd = "gone"', "pool worker: cwd: "),
    ],
)
def test_a_pool_whose_command_cannot_start_exits_2_before_anything_starts(
    tmp_path: Path, old: str, new: str, field: str
) -> None:
    copy_example(tmp_path)
    text = (tmp_path / "fleet.toml").read_text()
    pool = text.index("[[pools]]")
    (tmp_path / "fleet.toml").write_text(text[:pool] + text[pool:].replace(old, new, 1))
    out = _up(tmp_path)
    assert out.returncode == 2, out.stderr
    err = out.stderr.strip().splitlines()
    assert len(err) == 1 and f"fleet.toml: {field}" in err[0], out.stderr
    assert not (tmp_path / ".corral").exists()  # refused before the lock, the store, a spawn
