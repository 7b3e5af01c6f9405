"""The runner SDK (corral.Runner) and ``corral runner -- CMD``: real stores, real
processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import corral

CORRAL = [sys.executable, "-m", "corral"]


def _released(c: Any) -> list[Any]:
    return [e for e in c.events(limit=10_000) if e.kind == "activation_released"]


def test_a_runner_calls_the_handler_of_each_kind_and_releases(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'c.db'}"
    seen: list[tuple[str, str]] = []

    def inbox(a: Any) -> dict[str, Any]:
        seen.append((a.kind, a.agent_id))
        return {"inbox_read": len(a.inbox), "comments": 1}

    def discovery(a: Any) -> dict[str, Any]:
        seen.append((a.kind, a.agent_id))
        return {"posts": 1, "topic": "rust"}

    with corral.connect(url) as c:
        for name in ("a", "b"):
            c.add_agent(name)
        c.notify("b", "hello")
        r = corral.Runner(
            "r1",
            "hybrid",
            on_inbox=inbox,
            on_discovery=discovery,
            cluster=c,
            heartbeat_interval=0.5,
            handle_signals=False,
        )
        assert r.run(max_activations=3) == 0
        assert r.exit_reason == "max_activations"
        assert seen == [("inbox", "b"), ("discovery", "a"), ("discovery", "b")]
        outcomes = [e.data["outcome"] for e in _released(c)]
        assert outcomes[0] == {"inbox_read": 1, "comments": 1}
        assert outcomes[1] == {"posts": 1, "topic": "rust", "inbox_read": 0}
        assert c.get_node("r1").status == "terminated" and c.get_node("r1").role == "runner"
        assert c.get_agent("b").activation_count == 2


def test_a_failing_handler_still_releases_and_an_idle_runner_retires(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'c.db'}"

    def boom(a: Any) -> None:
        raise RuntimeError("no model today")

    with corral.connect(url) as c:
        c.add_agent("a", {"min_activation_interval": 3600})
        r = corral.Runner(
            "r1",
            "exploration",
            on_discovery=boom,
            cluster=c,
            poll_interval=0.02,
            idle_timeout_seconds=0.2,
            handle_signals=False,
        )
        assert r.run() == 0
        assert (r.exit_reason, r.activations) == ("retired", 1)
        assert _released(c)[0].data["outcome"]["error"] == "RuntimeError: no model today"
        assert c.get_node("r1").status == "terminated"
        assert c.list_assignments() == []


def test_corral_runner_runs_the_command_per_activation(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'c.db'}"
    with corral.connect(url) as c:
        c.add_agent("persona", {"interests": ["rust"]})
    script = (
        "import json, os, sys; a = json.load(sys.stdin); "
        "assert os.environ['CORRAL_AGENT_ID'] == a['agent_id']; "
        "print('thinking'); "
        "print(json.dumps({'posts': 1, 'kind': os.environ['CORRAL_ACTIVATION_KIND'],"
        " 'interests': a['config']['interests']}))"
    )
    env = {**os.environ, "CORRAL_RUNNER_MODE": "exploration", "CORRAL_URL": url}
    done = subprocess.run(
        [
            *CORRAL,
            "runner",
            "--id",
            "cli-runner",
            "--max-activations",
            "2",
            "-q",
            "--",
            sys.executable,
            "-c",
            script,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    with corral.connect(url) as c:
        released = _released(c)
        assert [e.data["outcome"] for e in released] == [
            {"posts": 1, "kind": "discovery", "interests": ["rust"], "inbox_read": 0}
        ] * 2
        assigned = [e for e in c.events() if e.kind == "activation_assigned"]
        assert {e.data["mode"] for e in assigned} == {"exploration"}


def test_corral_runner_refuses_a_bad_mode(tmp_path: Path) -> None:
    env = {**os.environ, "CORRAL_URL": f"sqlite:///{tmp_path / 'c.db'}"}
    bad = subprocess.run(
        [*CORRAL, "runner", "--mode", "sometimes", "--", "true"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2 and "--mode" in bad.stderr
    env["CORRAL_RUNNER_MODE"] = "weekly"
    bad = subprocess.run(
        [*CORRAL, "runner", "--", "true"], env=env, capture_output=True, text=True, timeout=60
    )
    assert bad.returncode == 2 and "--mode" in bad.stderr


def test_corral_agents_load_reads_config_files(tmp_path: Path) -> None:
    root = tmp_path / "agent-artifacts"
    (root / "claude-code-1").mkdir(parents=True)
    (root / "claude-code-1" / "config.yaml").write_text(
        "name: claude-code-1\ntype: claude\nmodel: claude-sonnet-4-20250514\n"
        "interests:\n  - rust\n  - debugging\nwatch_communities:\n  - m/debugging\n"
        "can_create_posts: true\nmax_daily_posts: 5\nmax_daily_comments: 50\n"
        "discovery:\n  respond_to_questions: true\n  respond_to_discussions: false\n"
        '  min_confidence: 0.7\nschedule_override:\n  - cron: "0 9 * * *"\n'
        "    task: daily_standup\n"
    )
    (root / "reviewer").mkdir()
    (root / "reviewer" / "config.toml").write_text('interests = ["review"]\n')
    (root / "notes").mkdir()  # no config: not an agent
    env = {**os.environ, "CORRAL_URL": f"sqlite:///{tmp_path / 'c.db'}"}
    ok = subprocess.run(
        [*CORRAL, "agents", "load", str(root)], env=env, capture_output=True, text=True, timeout=60
    )
    assert ok.returncode == 0, ok.stderr
    assert "loaded 2 agent(s): claude-code-1, reviewer" in ok.stdout
    listed = subprocess.run(
        [*CORRAL, "agents", "list", "--json"], env=env, capture_output=True, text=True, timeout=60
    )
    agents = {a["id"]: a for a in json.loads(listed.stdout)}
    assert agents["claude-code-1"]["config"]["discovery"]["min_confidence"] == 0.7
    assert agents["claude-code-1"]["next_due_task"] == "daily_standup"
    assert agents["reviewer"]["config"] == {"interests": ["review"]}
    # a bad file: exit 2, one line naming the file and the field; nothing added
    (root / "zeta").mkdir()
    (root / "zeta" / "config.json").write_text('{"max_daily_posts": "five"}')
    bad = subprocess.run(
        [*CORRAL, "agents", "load", str(root)], env=env, capture_output=True, text=True, timeout=60
    )
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines() == [
        f"error: {root / 'zeta' / 'config.json'}: max_daily_posts must be a non-negative integer"
    ]
    with corral.connect(env["CORRAL_URL"]) as c:
        assert [a.id for a in c.list_agents()] == ["claude-code-1", "reviewer"]


def test_corral_notify_and_assignments(tmp_path: Path) -> None:
    env = {**os.environ, "CORRAL_URL": f"sqlite:///{tmp_path / 'c.db'}"}
    with corral.connect(env["CORRAL_URL"]) as c:
        c.add_agent("a")
        c.register_node("r1", "runner")
    out = subprocess.run(
        [*CORRAL, "notify", "a", '{"mention": "@a"}'],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0 and "notified a" in out.stdout
    with corral.connect(env["CORRAL_URL"]) as c:
        assignment = c.get_assignment("r1")
        assert assignment is not None and assignment.inbox[0].payload == {"mention": "@a"}
    out = subprocess.run(
        [*CORRAL, "assignments"], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0 and " a " in out.stdout and "r1" in out.stdout
    bad = subprocess.run(
        [*CORRAL, "notify", "ghost", "x"], env=env, capture_output=True, text=True, timeout=60
    )
    assert bad.returncode == 2 and bad.stderr.startswith("error: agent_id:")
