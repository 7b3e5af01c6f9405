"""``corral status`` as tables: the Fleet's counts are the operations' answers (stats,
read_state, list_tasks), the nodes and the task board are theirs too, and ``--json``
is still ``read_state``'s record."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

import corral
from corral.cli import cli
from corral.cli._common import run_main
from corral.types import Client


@pytest.fixture
def url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "160")
    return f"sqlite:///{tmp_path / 'c.db'}"


@pytest.fixture
def c(url: str) -> Iterator[Client]:
    client = corral.connect(url)
    try:
        yield client
    finally:
        client.close()


def _status(url: str, capsys: pytest.CaptureFixture[str], *args: str) -> str:
    assert run_main(cli, ["--url", url, "status", *args]) == 0
    return capsys.readouterr().out


def _section(out: str, title: str) -> list[str]:
    """The lines of the section headed ``title`` (up to the next blank line)."""
    lines = out.splitlines()
    start = lines.index(title) + 1
    end = next((i for i in range(start, len(lines)) if not lines[i].strip()), len(lines))
    return lines[start:end]


def _figures(out: str) -> dict[str, str]:
    """The Fleet section as label -> value (labels and values are two spaces apart)."""
    rows = {}
    for line in _section(out, "Fleet"):
        label, _, value = line.strip().partition("  ")
        rows[label] = value.strip()
    return rows


def test_status_prints_the_fleets_counts_as_the_operations_answer_them(
    url: str, c: Client, capsys: pytest.CaptureFixture[str]
) -> None:
    """Live nodes against max_agents, pending / in progress, done and failed in the
    last hour, the oldest pending task's age, the last recovery, and the last
    assessment with the counts it was made from: each the value stats and
    read_state give; the terminated node is not in the nodes table."""
    c.register_node("W1", "developer", "claude-sonnet-4-5", heartbeat_interval=30)
    c.register_node("W2", "developer")
    c.register_node("Gone", "architect")
    c.terminate_node("Gone")
    c.add_tasks([{"title": f"Implement feature {i}", "priority": "high"} for i in range(6)])
    for outcome in ("done", "done", "failed"):
        t = c.claim_best_task("W1", "developer")
        assert t is not None
        if outcome == "done":
            c.complete_task(t.id, "W1", t.epoch)
        else:
            c.fail_task(t.id, "W1", t.epoch, "boom", retry=False)
    held = c.claim_best_task("W2", "developer")
    assert held is not None
    c.assess_workload()
    out = _status(url, capsys)
    stats, state = c.stats(), c.read_state()
    f = _figures(out)
    assert f["Live nodes"] == f"{len(stats.live_nodes)} / {stats.max_agents}" == "2 / 4"
    assert f["Pending"] == str(stats.tasks["pending"]) == "2"
    assert f["In progress"] == str(stats.tasks["in_progress"]) == "1"
    assert f["Done (last hour)"] == str(stats.finished_last_hour["done"]) == "2"
    assert f["Failed (last hour)"] == str(stats.finished_last_hour["failed"]) == "1"
    assert f["Oldest pending"].endswith(" s")  # seconds old, in the age words
    assert f["Last recovery"] == "never (0 in the event log)"
    wd, md = state.work_distribution, state.metadata
    status, rec = wd["workload_status"], wd["spawn_recommendation"]
    assert f["Assessment"].startswith(f"{status} → {rec}, ")
    assert f["from"] == (
        f"{md['pending_task_count']} pending, {md['active_agent_count']} active of "
        f"{md['max_agents']} allowed, {md['idle_agent_count']} idle"
    )
    nodes = [line.split()[0] for line in _section(out, "Nodes")[2:]]
    assert nodes == [n.id for n in c.list_nodes() if n.status != "terminated"]
    board = [line.split()[:2] for line in _section(out, "Task board")[2:]]
    want = c.list_tasks("in_progress") + c.list_tasks("pending")
    assert board == [[str(t.id), t.status] for t in want]
    [row] = [line for line in _section(out, "Task board") if line.startswith(str(held.id))]
    assert "@W2 lease " in row and f"epoch {held.epoch}" in row


def test_status_json_is_read_states_record(
    url: str, c: Client, capsys: pytest.CaptureFixture[str]
) -> None:
    c.register_node("W1", "developer")
    c.add_task("Implement it")
    got = json.loads(_status(url, capsys, "--json"))
    want = c.read_state().to_dict()
    assert set(got) == set(want)
    assert (got["tasks"], got["nodes"]) == (want["tasks"], want["nodes"])


def test_status_limits_the_board_and_says_how_many_more(
    url: str, c: Client, capsys: pytest.CaptureFixture[str]
) -> None:
    c.add_tasks([{"title": f"Task {i}"} for i in range(5)])
    out = _status(url, capsys, "--limit", "2")
    assert len(_section(out, "Task board")) == 2 + 2 + 1  # head, rule, rows, the note
    assert "... and 3 more (--limit)" in out
    assert _figures(out)["Oldest pending"].startswith("≥ ")  # only 2 of 5 were read
