"""``corral worker`` refuses arguments that would fail the whole board: exit 2 with one
line naming the option, before anything is registered or claimed."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import corral
from corral.cli import cli
from corral.cli._common import run_main
from corral.types import Client


@pytest.fixture
def board(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Client]:
    """A cluster with one pending task; the CLI runs in ``tmp_path`` against it."""
    url = f"sqlite:///{tmp_path / 'w.db'}"
    monkeypatch.setenv("CORRAL_URL", url)
    monkeypatch.chdir(tmp_path)
    c = corral.connect(url)
    c.add_task("Implement the thing", priority="high")
    yield c
    c.close()


def _untouched(c: Client) -> None:
    """Nothing claimed, nothing registered."""
    [task] = c.list_tasks()
    assert (task.status, task.attempts, task.epoch, task.assigned_to) == ("pending", 0, 0, None)
    assert c.list_nodes() == []


def _worker(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = run_main(cli, ["worker", *args])
    return code, capsys.readouterr().err


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("--task-timeout", "0"),
        ("--task-timeout", "-5"),
        ("--task-timeout", "nan"),
        ("--task-timeout", "inf"),
        ("--task-timeout", "abc"),
        ("--idle-timeout", "-1"),
        ("--idle-timeout", "0"),
        ("--idle-timeout", "nan"),
        ("--max-tasks", "0"),
        ("--max-tasks", "-1"),
        ("--retry-delay", "nan"),
        ("--retry-delay", "-1"),
        ("--retry-delay", "inf"),
        ("--heartbeat-interval", "0"),
        ("--heartbeat-interval", "-1"),
        ("--heartbeat-interval", "nan"),
        ("--heartbeat-interval", "1e300"),
        ("--retry-attempts", "0"),
        ("--outage-tolerance", "-1"),
        ("--outage-tolerance", "601"),
        ("--outage-tolerance", "nan"),
        ("--outage-tolerance", "soon"),
        ("--metrics-keep", "0"),
        ("--webhook", "ftp://example.com/hook"),
        ("--id", ""),
        ("--id", " W1"),
    ],
)
def test_a_bad_option_exits_2_naming_it_and_claims_nothing(
    board: Client, capsys: pytest.CaptureFixture[str], option: str, value: str
) -> None:
    args = {"--id": "W1", "--role": "developer", option: value}
    flat = [x for pair in args.items() for x in pair]
    code, err = _worker(capsys, *flat, "--", "true")
    assert code == 2
    assert err.count("\n") == 1, err
    assert err.startswith(f"error: Invalid value for '{option}': "), err
    _untouched(board)


def test_the_github_options_are_checked_together_and_each(
    board: Client, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = _worker(
        capsys,
        "--id",
        "W1",
        "--role",
        "developer",
        "--github-repo",
        "a/b",
        "--github-issue",
        "0",
        "--",
        "true",
    )
    assert (code, err.count("\n")) == (2, 1) and "'--github-issue'" in err
    code, err = _worker(
        capsys,
        "--id",
        "W1",
        "--role",
        "developer",
        "--github-repo",
        "nope",
        "--github-issue",
        "3",
        "--",
        "true",
    )
    assert (code, err.count("\n")) == (2, 1) and "'--github-repo'" in err
    _untouched(board)


def test_a_bad_role_exits_2_naming_it_and_registers_nothing(
    board: Client, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = _worker(capsys, "--id", "W1", "--role", "wizard", "--", "true")
    assert code == 2 and err.count("\n") == 1 and err.startswith("error: role: "), err
    _untouched(board)


def _commands(tmp_path: Path) -> list[tuple[str, str]]:
    plain = tmp_path / "plain.sh"
    plain.write_text("#!/bin/sh\necho hi\n")
    plain.chmod(stat.S_IRUSR | stat.S_IWUSR)
    return [
        ("/nonexistent/cmd", "/nonexistent/cmd: no such file"),
        ("no-such-program-corral-test", "no-such-program-corral-test: not found on $PATH"),
        (str(tmp_path), f"{tmp_path}: is a directory"),
        ("./plain.sh", "./plain.sh: is not executable"),
    ]


def test_a_command_that_cannot_run_is_refused_before_the_first_claim(
    board: Client, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    for command, why in _commands(tmp_path):
        code, err = _worker(
            capsys, "--id", "W1", "--role", "developer", "--idle-timeout", "1", "--", command, "arg"
        )
        assert code == 2
        assert err == f"error: Invalid value for 'COMMAND': {why}\n"
        _untouched(board)


def test_the_reported_invocation_as_a_real_process(board: Client, tmp_path: Path) -> None:
    """The issue's reproduction: it used to exit 0 after failing every task for good."""
    board.add_task("Implement more")
    board.add_task("Implement the rest")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "corral",
            "worker",
            "--id",
            "w",
            "--role",
            "developer",
            "--idle-timeout",
            "1",
            "--",
            "/nonexistent/cmd",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env=os.environ,
    )
    assert done.returncode == 2
    assert done.stderr == "error: Invalid value for 'COMMAND': /nonexistent/cmd: no such file\n"
    tasks = board.list_tasks()
    assert [(t.status, t.attempts) for t in tasks] == [("pending", 0)] * 3
    assert board.list_nodes() == []


def test_a_command_found_on_path_or_by_path_runs(
    board: Client, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The check refuses only what cannot run: an executable by path works."""
    script = tmp_path / "ok.sh"
    script.write_text("#!/bin/sh\necho '{\"ok\": 1}'\n")
    script.chmod(0o755)
    code = run_main(
        cli,
        ["worker", "--id", "W1", "--role", "developer", "--max-tasks", "1", "-q", "--", "./ok.sh"],
    )
    assert code == 0
    [task] = board.list_tasks()
    assert (task.status, task.result) == ("done", {"ok": 1})


def test_help_lists_every_exit_code(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_main(cli, ["worker", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    for code in (
        "0 retired",
        "1 terminated by the cluster",
        "2 bad arguments",
        "3 store unavailable",
    ):
        assert code in text, text
