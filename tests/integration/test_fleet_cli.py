"""`corral up`'s refusals, each one line and exit 2, before anything is written."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.support.fleet_up import corral_cmd, env

POOL = '[[pools]]\nid = "p"\ncmd = "true"\nrole = "developer"\n'


def up(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        corral_cmd(*args), cwd=tmp_path, env=env(), capture_output=True, text=True, timeout=30
    )


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


def test_corral_worker_takes_its_id_and_role_from_a_members_environment(tmp_path: Path) -> None:
    import corral

    url = f"sqlite:///{tmp_path / 'c.db'}"
    with corral.connect(url) as c:
        c.add_task("one")
    e = env(CORRAL_AGENT_ID="pool-1", CORRAL_ROLE="architect", CORRAL_URL=url)
    argv = corral_cmd("worker", "--idle-timeout", "0.1", "-q", "--", "true")
    out = subprocess.run(argv, cwd=tmp_path, env=e, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    with corral.connect(url) as c:
        node = c.get_node("pool-1")
        assert (node.role, node.status) == ("architect", "terminated")
        assert c.list_tasks(status="done")[0].title == "one"
