"""The manifest: TOML and the JSON agents file, strict validation, dependency order."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest

from corral.errors import InvalidInputError
from corral.supervisor.manifest import (
    AgentSpec,
    Manifest,
    ManifestError,
    Rlimits,
    Settings,
    dependents,
    load_manifest,
    parse_manifest,
    phases,
    stop_phases,
)
from corral.supervisor.policy import RestartConfig

FULL = """
[supervisor]
heartbeat_interval = 2
heartbeat_timeout = 6.5
startup_timeout = 20
stop_timeout = 3
stop_signal = "INT"
backoff_base = 0.5
backoff_cap = 8
backoff_jitter = 0.25
backoff_reset_after = 30
restart_limit = 4
restart_window = 60
log_max_bytes = 1000
log_keep = 2
orphans = "kill"

[[agents]]
id = "relay"
cmd = "./relay"
args = ["relay", "--port", "7777"]
restart = "always"
env = { RUST_LOG = "info" }
cwd = "/srv/relay"
heartbeat = "pipe"
startup_timeout = 5
stop_timeout = 1.5
stop_signal = "SIGQUIT"
rlimits = { memory = 268435456, open_files = 1024 }
log_max_bytes = 4096
log_keep = 3

[[agents]]
id = "user0"
cmd = "python"
depends_on = ["relay"]
heartbeat = "cluster"
"""


def write(tmp_path: Path, text: str, name: str = "fleet.toml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_a_full_toml_manifest(tmp_path: Path) -> None:
    m = load_manifest(write(tmp_path, FULL))
    assert m.path.endswith("fleet.toml") and m.ids == ("relay", "user0")
    assert m.settings == Settings(
        heartbeat_interval=2.0,
        heartbeat_timeout=6.5,
        startup_timeout=20.0,
        stop_timeout=3.0,
        stop_signal=signal.SIGINT,
        backoff_base=0.5,
        backoff_cap=8.0,
        backoff_jitter=0.25,
        backoff_reset_after=30.0,
        restart_limit=4,
        restart_window=60.0,
        log_max_bytes=1000,
        log_keep=2,
        orphans="kill",
    )
    assert m.settings.restart_config() == RestartConfig(0.5, 8.0, 0.25, 4, 60.0, 30.0)
    relay = m.agent("relay")
    assert relay == AgentSpec(
        id="relay",
        cmd="./relay",
        args=("relay", "--port", "7777"),
        restart="always",
        env={"RUST_LOG": "info"},
        cwd="/srv/relay",
        depends_on=(),
        heartbeat="pipe",
        startup_timeout=5.0,
        stop_timeout=1.5,
        stop_signal=signal.SIGQUIT,
        rlimits=Rlimits(memory=268435456, open_files=1024),
        log_max_bytes=4096,
        log_keep=3,
        heartbeat_interval=2.0,
        heartbeat_timeout=6.5,
    )
    assert relay.argv == ["./relay", "relay", "--port", "7777"]
    # an agent that sets nothing takes the [supervisor] defaults
    user0 = m.agent("user0")
    assert (user0.restart, user0.startup_timeout, user0.stop_timeout) == ("on-failure", 20.0, 3.0)
    assert (user0.stop_signal, user0.log_max_bytes, user0.log_keep) == (signal.SIGINT, 1000, 2)
    assert user0.rlimits == Rlimits() and user0.env == {} and user0.cwd is None
    with pytest.raises(KeyError):
        m.agent("nobody")


def test_defaults_without_a_supervisor_table(tmp_path: Path) -> None:
    m = load_manifest(write(tmp_path, '[[agents]]\nid = "a"\ncmd = "true"\n'))
    s = m.settings
    assert (s.heartbeat_interval, s.heartbeat_timeout, s.startup_timeout) == (5.0, 15.0, 30.0)
    assert (s.stop_timeout, s.stop_signal, s.orphans) == (10.0, signal.SIGTERM, "adopt")
    assert s.restart_config() == RestartConfig(1.0, 16.0, 0.5, 10, 300.0, 60.0)
    a = m.agent("a")
    assert (a.heartbeat, a.restart, a.log_max_bytes, a.log_keep) == (
        "none",
        "on-failure",
        10 * 1024 * 1024,
        5,
    )


def test_the_documents_agents_json_is_read_as_is(tmp_path: Path) -> None:
    doc = {
        "relay_url": "ws://127.0.0.1:7777",
        "mint_url": "http://127.0.0.1:3338",
        "agents": [
            {"id": "nostr-relay", "cmd": "./strfry", "args": ["relay"], "restart": "always"},
            {
                "id": "cashu-mint",
                "cmd": "python",
                "args": ["-m", "cashu.mint"],
                "restart": "always",
            },
            {
                "id": "user0",
                "cmd": "python",
                "args": ["src/user/main.py", "0"],
                "restart": "on-failure",
            },
            {
                "id": "user1",
                "cmd": "python",
                "args": ["src/user/main.py", "1"],
                "restart": "on-failure",
            },
        ],
    }
    m = load_manifest(write(tmp_path, json.dumps(doc), "agents.json"))
    assert m.ids == ("nostr-relay", "cashu-mint", "user0", "user1")
    assert m.extra == {"relay_url": "ws://127.0.0.1:7777", "mint_url": "http://127.0.0.1:3338"}
    assert m.agent("user1").args == ("src/user/main.py", "1")
    assert [[a.id for a in p] for p in phases(m)] == [
        ["nostr-relay", "cashu-mint", "user0", "user1"]
    ]


def test_manifest_error_is_invalid_input_naming_file_agent_and_field(tmp_path: Path) -> None:
    p = write(tmp_path, '[[agents]]\nid = "user3"\ncmd = "x"\nrestart = "sometimes"\n')
    with pytest.raises(ManifestError) as info:
        load_manifest(p)
    e = info.value
    assert str(e) == f"{p}: agent user3: restart: must be always, on-failure or never"
    assert isinstance(e, InvalidInputError) and (e.exit_code, e.code) == (2, "invalid_input")
    assert (e.path, e.agent, e.field) == (str(p), "user3", "restart")


def agent(**kw: object) -> dict[str, object]:
    return {"id": "a", "cmd": "true", **kw}


BAD_AGENT = [
    (agent(restart="sometimes"), "a", "restart", "must be always, on-failure or never"),
    (agent(restart=1), "a", "restart", "must be always, on-failure or never"),
    (agent(heartbeat="nostr"), "a", "heartbeat", "must be none, pipe or cluster"),
    (agent(cmd=""), "a", "cmd", "must be a non-empty string"),
    (agent(cmd=["python"]), "a", "cmd", "must be a non-empty string"),
    ({"id": "a"}, "a", "cmd", "is required"),
    ({"cmd": "x"}, "#1", "id", "is required"),
    (agent(id=""), "", "id", "must be 1-64 letters"),
    (agent(id="../etc"), "../etc", "id", "must be 1-64 letters"),
    (agent(id="a/b"), "a/b", "id", "must be 1-64 letters"),
    (agent(id=".hidden"), ".hidden", "id", "must be 1-64 letters"),
    (agent(id="x" * 65), "x" * 65, "id", "must be 1-64 letters"),
    (agent(id=3), "#1", "id", "must be 1-64 letters"),
    (agent(id="supervisor"), "supervisor", "id", "reserved"),
    (agent(args="run"), "a", "args", "must be a list of strings"),
    (agent(args=["ok", 2]), "a", "args", "must be a list of strings"),
    (agent(env=["A=1"]), "a", "env", "must be a table of strings"),
    (agent(env={"A": 1}), "a", "env.A", "must be a string"),
    (agent(env={"A=B": "1"}), "a", "env.A=B", "must not contain '='"),
    (agent(cwd=""), "a", "cwd", "must be a non-empty string"),
    (agent(depends_on="b"), "a", "depends_on", "must be a list of strings"),
    (agent(depends_on=["ghost"]), "a", "depends_on", "unknown agent ghost"),
    (agent(depends_on=["a"]), "a", "depends_on", "cycle a -> a"),
    (agent(startup_timeout="30s"), "a", "startup_timeout", "must be a number of seconds"),
    (agent(startup_timeout=0), "a", "startup_timeout", "must be more than 0"),
    (agent(startup_timeout=True), "a", "startup_timeout", "must be a number of seconds"),
    (agent(stop_timeout=-1), "a", "stop_timeout", "must be at least 0"),
    (agent(stop_timeout=float("inf")), "a", "stop_timeout", "must be a number of seconds"),
    (agent(stop_signal="SIGNOPE"), "a", "stop_signal", "must be a signal name"),
    (agent(stop_signal=15), "a", "stop_signal", "must be a signal name"),
    (agent(stop_signal="SIG_DFL"), "a", "stop_signal", "must be a signal name"),
    (agent(rlimits={"memory": "256M"}), "a", "rlimits.memory", "must be an integer"),
    (agent(rlimits={"memory": 0}), "a", "rlimits.memory", "at least 1"),
    (agent(rlimits={"cpu": 1}), "a", "rlimits.cpu", "unknown key"),
    (agent(rlimits=5), "a", "rlimits", "must be a table"),
    (agent(log_max_bytes=0), "a", "log_max_bytes", "at least 1"),
    (agent(log_max_bytes=1.5), "a", "log_max_bytes", "must be an integer"),
    (agent(log_keep=-1), "a", "log_keep", "at least 0"),
    (agent(retries=3), "a", "retries", "unknown key"),
]


@pytest.mark.parametrize(("entry", "who", "field", "reason"), BAD_AGENT)
def test_bad_agents_are_refused_naming_the_field(
    entry: dict[str, object], who: str, field: str, reason: str
) -> None:
    with pytest.raises(ManifestError) as info:
        parse_manifest({"agents": [entry]}, path="fleet.toml", fmt="json")
    e = info.value
    assert (e.path, e.agent, e.field) == ("fleet.toml", who, field)
    assert str(e).startswith(f"fleet.toml: agent {who}: {field}: ")
    assert reason in e.reason


BAD_SETTINGS = [
    ({"heartbeat_timeout": "15"}, "supervisor.heartbeat_timeout", "number of seconds"),
    ({"heartbeat_interval": 0}, "supervisor.heartbeat_interval", "more than 0"),
    ({"heartbeat_interval": 20}, "supervisor.heartbeat_timeout", "at least heartbeat_interval"),
    ({"backoff_cap": 0.5}, "supervisor.backoff_cap", "at least backoff_base"),
    ({"restart_limit": 0}, "supervisor.restart_limit", "at least 1"),
    ({"orphans": "ignore"}, "supervisor.orphans", "must be adopt or kill"),
    ({"stop_signal": "TERMINATE"}, "supervisor.stop_signal", "signal name"),
    ({"tick": 1}, "supervisor.tick", "unknown key"),
]


@pytest.mark.parametrize(("table", "field", "reason"), BAD_SETTINGS)
def test_bad_supervisor_settings_are_refused(
    table: dict[str, Any], field: str, reason: str
) -> None:
    with pytest.raises(ManifestError) as info:
        parse_manifest({"supervisor": table, "agents": [agent()]}, path="f.toml")
    assert (info.value.agent, info.value.field) == (None, field)
    assert str(info.value).startswith(f"f.toml: {field}: ")
    assert reason in info.value.reason


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("agents = 3", "f.toml: agents: must be a non-empty list of agent tables"),
        ("agents = []", "f.toml: agents: must be a non-empty list of agent tables"),
        ("x = 1\n[[agents]]\nid='a'\ncmd='b'", "f.toml: x: unknown key"),
        ("supervisor = 1\n[[agents]]\nid='a'\ncmd='b'", "f.toml: supervisor: must be a table"),
        (
            "[[agents]]\nid='a'\ncmd='b'\n[[agents]]\nid='a'\ncmd='c'",
            "f.toml: agent a: id: duplicate id",
        ),
        ("[[agents]\n", "f.toml: not valid TOML"),
    ],
)
def test_bad_toml_documents(tmp_path: Path, text: str, message: str) -> None:
    p = write(tmp_path, text, "f.toml")
    with pytest.raises(ManifestError) as info:
        load_manifest(p)
    assert str(info.value).startswith(str(p.parent) + "/" + message)


def test_unreadable_and_bad_json(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match=r"missing\.toml: cannot read"):
        load_manifest(tmp_path / "missing.toml")
    with pytest.raises(ManifestError, match=r"a\.json: not valid JSON"):
        load_manifest(write(tmp_path, "{", "a.json"))
    with pytest.raises(ManifestError, match=r"b\.json: must be a table"):
        load_manifest(write(tmp_path, "[]", "b.json"))


def test_signal_names_in_any_spelling() -> None:
    for spelling in ("SIGTERM", "TERM", "sigterm", "term"):
        m = parse_manifest({"agents": [agent(stop_signal=spelling)]})
        assert m.agent("a").stop_signal is signal.SIGTERM


def chain(*pairs: tuple[str, list[str]]) -> Manifest:
    return parse_manifest({"agents": [{"id": i, "cmd": "x", "depends_on": d} for i, d in pairs]})


def test_a_cycle_is_named() -> None:
    with pytest.raises(ManifestError) as info:
        chain(("web", []), ("a", ["c"]), ("b", ["a"]), ("c", ["b", "web"]))
    e = info.value
    assert (e.agent, e.field) == ("a", "depends_on")
    assert e.reason == "cycle a -> c -> b -> a"


def test_phases_and_stop_order() -> None:
    m = chain(
        ("user0", ["relay", "mint"]),
        ("relay", []),
        ("mint", []),
        ("user1", ["relay"]),
        ("shop", ["user0"]),
        ("solo", []),
    )
    ids = [[a.id for a in p] for p in phases(m)]
    assert ids == [["relay", "mint", "solo"], ["user0", "user1"], ["shop"]]
    assert [[a.id for a in p] for p in stop_phases(m)] == [
        ["shop"],
        ["user1", "user0"],
        ["solo", "mint", "relay"],
    ]
    # every agent comes after all its dependencies
    position = {a.id: n for n, p in enumerate(phases(m)) for a in p}
    assert all(position[d] < position[a.id] for a in m.agents for d in a.depends_on)
    assert [a.id for a in dependents(m, "relay")] == ["user0", "user1", "shop"]
    assert [a.id for a in dependents(m, "relay", transitive=False)] == ["user0", "user1"]
    assert dependents(m, "shop") == []
