"""docs/mcp.md's Python client example, run exactly as the page shows it, against a
real ``corral serve`` with the pinned MCP SDK; and the page cites only files that
exist."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import corral
from tests.integration.test_mcp_transports import Server, _free_port, serve_argv

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "mcp.md"
HEADING = "### Python (the `mcp` SDK 2.x)"


def example_code() -> str:
    """The first ```python block after the example's heading in docs/mcp.md."""
    text = DOC.read_text(encoding="utf-8")
    assert HEADING in text, f"{HEADING!r} is gone from docs/mcp.md"
    after = text.split(HEADING, 1)[1]
    match = re.search(r"```python\n(.*?)```", after, flags=re.DOTALL)
    assert match, "no python block under the example's heading"
    return match.group(1)


@pytest.mark.slow
def test_the_documented_python_client_runs_against_corral_serve(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'corral.db'}"
    token = "s3cret-operator-token"
    token_file = tmp_path / "token"
    token_file.write_text(token + "\n")
    token_file.chmod(0o600)
    port = _free_port()
    argv = serve_argv(url, port, token_file, "--no-monitor")
    env = {k: v for k, v in os.environ.items() if k != "CORRAL_TOKEN"}
    server = Server(argv, port, env)
    script = tmp_path / "client.py"
    script.write_text(example_code(), encoding="utf-8")
    server.start()
    try:
        run = subprocess.run(
            [sys.executable, str(script)],
            env={**env, "CORRAL_MCP_URL": f"http://127.0.0.1:{port}/mcp", "CORRAL_TOKEN": token},
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        server.kill()
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == [
        f"connected to corral {corral.__version__}",
        "tools: accept_spawn_request, add_task, assess_workload, broadcast, cancel_task, "
        "cancel_tasks, catch_up, claim_best_task, complete_task, create_token, "
        "decline_spawn_request, fail_task, get_assignment, get_workflow_run, heartbeat, "
        "list_idle_workflows, list_tokens, notify, read_inbox, read_state, register_node, "
        "release_assignment, release_workflow_run, report_progress, requeue_task, "
        "requeue_tasks, resume_workflow_run, revoke_token, run_workflow, send_workflow_event, "
        "set_agent_status, spawn_requests, usage",
        "Node Node-PY01 registered as developer (high). Active nodes: 1/4",
        "Added task 1: Write the changelog (priority: medium)",
        "Claimed task 1: Write the changelog",
        "Completed task 1: Write the changelog",
        "Node Node-PY01 is now terminated",
    ]
    with corral.connect(url) as c:
        assert c.get_task(1).status == "done"
        assert c.get_node("Node-PY01").status == "terminated"


def test_the_page_cites_only_files_the_repository_has() -> None:
    """Every ``*.md`` docs/mcp.md names exists (in the repository or in docs/)."""
    names = set(re.findall(r"[\w./-]+\.md\b", DOC.read_text(encoding="utf-8")))
    missing = [n for n in sorted(names) if not ((ROOT / n).exists() or (DOC.parent / n).exists())]
    assert missing == []


def test_the_sdk_names_the_page_gives_are_the_pinned_sdks() -> None:
    """Every ``mcp.NAME`` the example's section names is exported by the pinned SDK,
    and a name the page says is gone is not (it said ``ClientSession`` was gone,
    which 2.x still exports)."""
    import mcp

    section = DOC.read_text(encoding="utf-8").split(HEADING, 1)[1].split("```python", 1)[0]
    named = re.findall(r"`mcp\.(\w+)`", section)
    assert named, "the section names no SDK class"
    assert [n for n in named if not hasattr(mcp, n)] == []
    for sentence in re.split(r"(?<=[.;)])\s", section):
        if re.search(r"\b(is|are) gone\b", sentence):
            gone = re.findall(r"`(\w+)`", sentence)
            assert [n for n in gone if hasattr(mcp, n)] == [], sentence
