"""The fleet manifest: pools, [cluster], [board]; every error names the file, the
pool (or agent) and the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from corral.errors import InvalidInputError
from corral.fleet.manifest import load_fleet, parse_fleet
from corral.supervisor.manifest import ManifestError

GOOD = """
[cluster]
settings = { max_agents = 6, idle_timeout_seconds = 3 }

[board]
seed = "tasks.jsonl"

[[agents]]
id = "relay"
cmd = "sleep"
args = ["100"]
heartbeat = "pipe"

[[pools]]
id = "dev"
cmd = "corral"
args = ["worker", "--", "true"]
env = { X = "1" }
role = "developer"
min = 0
max = 3
cooldown = 2.5
scale = "auto"
depends_on = ["relay"]
"""


def write(
    tmp_path: Path, text: str, seed: str = '{"title": "a"}\n{"title": "b", "priority": "high"}\n'
) -> Path:
    (tmp_path / "tasks.jsonl").write_text(seed)
    p = tmp_path / "corral.toml"
    p.write_text(text)
    return p


def test_a_good_manifest(tmp_path: Path) -> None:
    m = load_fleet(write(tmp_path, GOOD))
    assert m.supervisor.ids == ("relay",)
    (pool,) = m.pools
    assert (pool.id, pool.role, pool.limits.min, pool.limits.max) == ("dev", "developer", 0, 3)
    assert (pool.limits.cooldown, pool.limits.scale) == (2.5, "auto")
    member = pool.member(2)
    assert member.id == "dev-2" and member.restart == "on-failure"
    assert member.depends_on == ("relay",)
    assert dict(member.env) == {"X": "1", "CORRAL_POOL": "dev", "CORRAL_ROLE": "developer"}
    assert m.seed == str(tmp_path / "tasks.jsonl")
    assert dict(m.cluster_settings) == {"max_agents": 6, "idle_timeout_seconds": 3}
    assert m.pool_of("dev-7") is pool and m.pool_of("relay") is None


def test_pools_alone_are_a_manifest() -> None:
    m = parse_fleet({"pools": [{"id": "p", "cmd": "true", "role": "developer"}]}, path="f.toml")
    assert m.supervisor.agents == () and m.pools[0].limits.max == 1


def test_the_examples_are_valid() -> None:
    for name in ("examples/fleet.toml", "examples/agents.toml"):
        m = load_fleet(name)
        assert m.pools


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ('role = "developer"\n', "", "pool dev: role: is required"),
        ("min = 0", "min = 4", "pool dev: max: must be at least min"),
        ("min = 0", "min = -1", "pool dev: min: must be an integer of at least 0"),
        ('scale = "auto"', 'scale = "sometimes"', "pool dev: scale: must be off, ask or auto"),
        ("cooldown = 2.5", 'cooldown = "10s"', "pool dev: cooldown: must be a number of seconds"),
        (
            'depends_on = ["relay"]',
            'depends_on = ["nope"]',
            "pool dev: depends_on: unknown agent nope",
        ),
        ('env = { X = "1" }', "env = 3", "pool dev: env: must be a table of strings"),
        ('id = "dev"', 'id = "relay"', "pool relay: id: duplicate id"),
        ('cmd = "corral"', 'cmd = "corral"\ncolour = "red"', "pool dev: colour: unknown key"),
        ('cmd = "corral"', 'cmd = ""', "pool dev: cmd: must be a non-empty string"),
        ('seed = "tasks.jsonl"', "seed = 3", "board.seed: must be the path of a JSON-lines file"),
        ("[cluster]", "board = 1\n[cluster]", "board: must be a table"),
        ("max_agents = 6,", "speed = 6,", "cluster.settings.speed: unknown setting"),
        ("[cluster]", '[cluster]\nurl = "http://x"', "cluster.url: must be a sqlite"),
    ],
)
def test_bad_fields_are_named(tmp_path: Path, old: str, new: str, message: str) -> None:
    text = GOOD.replace(old, new, 1)
    if "board = 1" in new:
        text = text.replace('[board]\nseed = "tasks.jsonl"\n', "")
    with pytest.raises(ManifestError) as e:
        load_fleet(write(tmp_path, text))
    assert isinstance(e.value, InvalidInputError)
    assert str(tmp_path / "corral.toml") in e.value.message
    assert message in e.value.message


def test_a_bad_seed_names_its_file_and_line(tmp_path: Path) -> None:
    with pytest.raises(ManifestError) as e:
        load_fleet(write(tmp_path, GOOD, seed='{"title": "a"}\n{"titel": "b"}\n'))
    assert "tasks.jsonl: line 2: must be an object with a title" in e.value.message


def test_unknown_top_level_key(tmp_path: Path) -> None:
    with pytest.raises(ManifestError) as e:
        load_fleet(write(tmp_path, "fleets = 1\n" + GOOD))
    assert "corral.toml: fleets: unknown key" in e.value.message


def test_an_agent_with_a_members_name_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ManifestError) as e:
        load_fleet(
            write(
                tmp_path,
                GOOD.replace('id = "relay"', 'id = "dev-1"').replace('depends_on = ["relay"]', ""),
            )
        )
    assert "pool dev: id: agent dev-1 has a member's name" in e.value.message


def test_a_pool_whose_member_ids_cannot_be_node_ids_is_refused(tmp_path: Path) -> None:
    """Members are ``<id>-<n>``: a long pool id with a large max makes node ids the
    cluster refuses (longer than 64 characters)."""
    long_id = "p" * 60
    text = GOOD.replace('id = "dev"', f'id = "{long_id}"').replace("max = 3", "max = 1000")
    with pytest.raises(ManifestError) as e:
        load_fleet(write(tmp_path, text))
    assert f"pool {long_id}: max: member ids" in e.value.message
    load_fleet(write(tmp_path, GOOD.replace('id = "dev"', f'id = "{long_id}"')))  # -3: fits


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        (
            'cmd = "corral"',
            'cmd = "no-such-command-here"',
            "pool dev: cmd: no-such-command-here: not found on PATH",
        ),
        ('cmd = "corral"', 'cmd = "./missing.sh"', "pool dev: cmd: ./missing.sh: no such file"),
        ('cmd = "corral"', 'cmd = "./tasks.jsonl"', "pool dev: cmd: ./tasks.jsonl: not executable"),
        ('cmd = "corral"', 'cmd = "corral"\ncwd = "nowhere"', "pool dev: cwd: nowhere: no such"),
        ('cmd = "sleep"', 'cmd = "no-such-agent-cmd"', "agent relay: cmd: no-such-agent-cmd: not"),
        (
            'env = { X = "1" }',
            f'env = {{ PATH = "{"/nonexistent"}" }}',
            "pool dev: cmd: corral: not found on PATH",
        ),
    ],
)
def test_a_command_that_cannot_start_is_named(
    tmp_path: Path, old: str, new: str, message: str
) -> None:
    """corral up checks that each pool's and agent's command starts as the supervisor
    would start it (on the PATH it will have, or as a file from its cwd)."""
    from corral.fleet.manifest import check_commands

    (tmp_path / "corral").write_text("#!/bin/sh\n")
    (tmp_path / "corral").chmod(0o755)
    environ = {"PATH": f"{tmp_path}:/usr/bin:/bin"}
    check_commands(load_fleet(write(tmp_path, GOOD)), environ)  # the good one passes
    fleet = load_fleet(write(tmp_path, GOOD.replace(old, new, 1)))
    with pytest.raises(ManifestError) as e:
        check_commands(fleet, environ)
    assert e.value.message.startswith(str(tmp_path / "corral.toml") + ": ")
    assert message in e.value.message
