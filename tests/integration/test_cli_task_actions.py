"""``corral task cancel``, ``task requeue``, ``task cancel-matching`` and
``task requeue-matching``: the operator's actions from the CLI (made from the
registry). Bad input exits 2 with one line naming the option and changes nothing."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

import corral
from corral.cli import cli
from corral.cli._common import run_main


@pytest.fixture
def board(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[corral.Cluster]:
    """A cluster with a failed task, a held one and two pending ones."""
    url = f"sqlite:///{tmp_path / 'c.db'}"
    monkeypatch.setenv("CORRAL_URL", url)
    c = corral.connect(url)
    assert isinstance(c, corral.Cluster)
    c.register_node("W1", "developer")
    failed = c.add_task("Implement the parser", priority="high")
    held = c.claim_best_task("W1", "developer")
    assert held is not None and held.id == failed.id
    c.fail_task(held.id, "W1", held.epoch, error="crash", retry=False)
    c.add_task("Implement the lexer", priority="high")
    assert c.claim_best_task("W1", "developer") is not None
    c.add_task("Write the docs")
    c.add_task("Implement the printer")
    yield c
    c.close()


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = run_main(cli, list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def _statuses(c: corral.Cluster) -> list[str]:
    return [t.status for t in sorted(c.list_tasks(), key=lambda t: t.id)]


def test_cancel_matching_counts_then_cancels(
    board: corral.Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = _run(capsys, "task", "cancel-matching", "--title-contains", "implement")
    assert (code, out.strip()) == (0, "2 tasks would change (dry run): 2, 4")
    assert _statuses(board) == ["failed", "in_progress", "pending", "pending"]
    code, out, _ = _run(
        capsys, "task", "cancel-matching", "--title-contains", "implement", "--dry-run", "false"
    )
    assert (code, out.strip()) == (0, "2 tasks changed: 2, 4")
    assert _statuses(board) == ["failed", "cancelled", "pending", "cancelled"]


def test_requeue_and_cancel_one_task(
    board: corral.Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = _run(capsys, "task", "requeue", "--task-id", "1", "--json")
    assert code == 0 and json.loads(out)["status"] == "pending"
    code, out, _ = _run(capsys, "task", "cancel", "--task-id", "3", "--reason", "dup", "--json")
    assert code == 0 and json.loads(out)["error"] == "cancelled by operator: dup"
    assert [
        e.data["actor"]
        for e in board.events()
        if e.kind.startswith("task_") and e.kind in ("task_requeued", "task_cancelled")
    ] == ["operator", "operator"]


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (("task", "cancel-matching", "--status", "done", "--dry-run", "false"), "--status"),
        (("task", "requeue-matching", "--status", "pending", "--dry-run", "false"), "--status"),
        (("task", "cancel-matching", "--min-age", "-5", "--dry-run", "false"), "--min-age"),
        (("task", "requeue-matching", "--priority", "urgent", "--dry-run", "false"), "--priority"),
        (("task", "cancel", "--task-id", "x1"), "--task-id"),
    ],
)
def test_bad_input_exits_2_naming_the_option(
    board: corral.Cluster,
    capsys: pytest.CaptureFixture[str],
    args: tuple[str, ...],
    option: str,
) -> None:
    before = _statuses(board)
    code, _, err = _run(capsys, *args)
    assert code == 2
    assert err.count("\n") == 1 and err.startswith(f"error: Invalid value for '{option}': "), err
    assert _statuses(board) == before


@pytest.mark.parametrize("command", ["cancel", "requeue"])
def test_an_unknown_task_exits_2_naming_it(
    board: corral.Cluster, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    before = _statuses(board)
    code, _, err = _run(capsys, "task", command, "--task-id", "99")
    assert (code, err) == (2, "error: task_id: unknown task 99\n")
    assert _statuses(board) == before


def test_a_finished_task_is_refused_with_exit_1(
    board: corral.Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _run(capsys, "task", "cancel", "--task-id", "1")
    assert code == 1 and "task 1 is failed" in err and err.count("\n") == 1
