"""The command line: the same operations, exit codes 0/1/2, one-line errors."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

import corral
from corral.cli import cli
from corral.cli._common import run_main
from corral.types import Client
from tests.support.worker_app import wait_for

CliRun = Callable[..., tuple[int, str, str]]
"""The ``corral_cli`` fixture: ``corral ARGS...`` in this process, as (code, out, err)."""


@pytest.fixture
def corral_cli(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> CliRun:
    monkeypatch.setenv("CORRAL_URL", f"sqlite:///{tmp_path / 'cli.db'}")
    monkeypatch.chdir(tmp_path)  # `corral init` writes .corral/token here, not in the checkout

    def run(*args: str) -> tuple[int, str, str]:
        code = run_main(cli, list(args))
        out = capsys.readouterr()
        return code, out.out, out.err

    return run


def test_a_round_trip_through_the_cli(corral_cli: CliRun) -> None:
    assert corral_cli("init")[0] == 0
    code, out, _ = corral_cli(
        "node", "register", "Node-X9J2", "developer", "--model", "claude-sonnet-4-5"
    )
    assert (code, out.strip()) == (
        0,
        "Node Node-X9J2 registered as developer (high). Active nodes: 1/4",
    )
    assert corral_cli("task", "add", "Implement user authentication", "-p", "high")[1].strip() == (
        "Added task 1: Implement user authentication"
    )
    code, out, _ = corral_cli("task", "claim", "Node-X9J2")
    assert out.strip() == "Claimed task 1: Implement user authentication (epoch 1)"
    code, out, _ = corral_cli(
        "task", "complete", "1", "Node-X9J2", "--epoch", "1", "--result", '{"pr": 7}'
    )
    assert code == 0
    code, out, _ = corral_cli("task", "show", "1", "--json")
    task = json.loads(out)
    assert (task["status"], task["result"], task["epoch"]) == ("done", {"pr": 7}, 1)
    code, out, _ = corral_cli("status")
    assert code == 0 and "Live nodes" in out and "Node-X9J2" in out
    code, out, _ = corral_cli("assess")
    assert "Status: IDLE" in out and "Recommendation: terminate_idle" in out
    code, out, _ = corral_cli("node", "list", "--json")
    assert [n["id"] for n in json.loads(out)] == ["Node-X9J2"]
    assert corral_cli("node", "terminate", "Node-X9J2")[0] == 0
    assert corral_cli("node", "list")[1].strip() == "(no nodes)"


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["task", "add", "x", "-p", "urgent"], "priority"),
        (["task", "add", ""], "title"),
        (["node", "register", "x" * 65, "developer"], "node_id"),
        (["node", "register", "A", "wizard"], "role"),
        (["node", "show", "Ghost"], "node_id"),
        (["task", "show", "abc"], "task_id"),
        (["task", "list", "--status", "open"], "status"),
        (["config", "set", "max_agents", "0"], "max_agents"),
        (["config", "set", "idle_timeout_seconds", "-5"], "idle_timeout_seconds"),
        (["config", "set", "colour", "blue"], "colour"),
    ],
)
def test_bad_input_exits_2_with_one_line_naming_the_field(
    corral_cli: CliRun, args: list[str], field: str
) -> None:
    corral_cli("init")
    code, out, err = corral_cli(*args)
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1 and err.startswith(f"error: {field}:"), err


def test_usage_errors_are_one_line_too(corral_cli: CliRun) -> None:
    code, _, err = corral_cli("task", "complete", "1")
    assert code == 2 and err.count("\n") == 1 and "NODE_ID" in err


def test_an_unreachable_store_exits_3_with_one_line(tmp_path: Path) -> None:
    """Not a line of the connection pool's retries before it (a real process: the
    test runner's log capture would hide them)."""
    url = "postgresql://corral@127.0.0.1:1/nowhere?connect_timeout=1"
    done = subprocess.run(
        [sys.executable, "-m", "corral", "--url", url, "status"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert done.returncode == 3
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1
    assert done.stderr.startswith("error: cannot reach PostgreSQL at "), done.stderr


def test_refusals_exit_1_with_the_error_prefix_and_the_documents_text(corral_cli: CliRun) -> None:
    corral_cli("config", "set", "max_agents", "1")
    corral_cli("node", "register", "A", "developer")
    code, _, err = corral_cli("node", "register", "B", "developer")
    assert (code, err) == (1, "error: Cluster at capacity (1 nodes). Registration rejected.\n")
    corral_cli("task", "add", "Implement x")
    corral_cli("task", "claim", "A")
    code, _, err = corral_cli("task", "complete", "1", "A", "--epoch", "2")
    assert (code, err) == (1, "error: task 1 has no epoch 2: its lease is at epoch 1\n")


def test_config_show_and_set(corral_cli: CliRun) -> None:
    corral_cli(
        "config",
        "set",
        "idle_timeout_seconds",
        "45",
        "role_keywords",
        '{"developer": ["build"], "tester": ["test"]}',
    )
    _, out, _ = corral_cli("config", "show", "--json")
    settings = json.loads(out)
    assert settings["idle_timeout_seconds"] == 45
    assert settings["role_keywords"]["tester"] == ["test"]
    assert corral_cli("node", "register", "T", "tester")[0] == 0


def test_console_script_runs(tmp_path: Path) -> None:
    """The installed ``corral`` entry point works as a real process."""
    env_url = f"sqlite:///{tmp_path / 'p.db'}"
    proc = subprocess.run(
        [sys.executable, "-m", "corral", "--url", env_url, "task", "add", "Plan it", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["roles"] == ["architect"]
    bad = subprocess.run(
        [sys.executable, "-m", "corral", "--url", env_url, "task", "add", "x", "-p", "nope"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2 and bad.stderr.startswith("error: priority:")


def test_commands_that_do_not_add_refuse_a_database_that_is_not_there(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A mistyped path is an error, not an empty new cluster: reading or acting on a
    cluster where no SQLite file is exits 2 with one line naming the url and the path,
    and creates nothing; commands that add (init, node register, task add, config set)
    create the database as before."""
    missing = tmp_path / "typo" / "corral.db"
    url = f"sqlite:///{missing}"
    for args in (
        ["status"],
        ["node", "list"],
        ["task", "show", "1"],
        ["task", "claim", "W1"],
        ["config", "show"],
        ["assess"],
    ):
        code = run_main(cli, ["--url", url, *args])
        err = capsys.readouterr().err
        assert code == 2, (args, err)
        assert err.splitlines() == [
            f"error: url: no corral database at {missing} (corral init creates one)"
        ]
    assert not (tmp_path / "typo").exists()
    assert run_main(cli, ["--url", url, "task", "add", "Implement it"]) == 0
    assert missing.exists()
    assert run_main(cli, ["--url", url, "task", "show", "1"]) == 0
    assert "Implement it" in capsys.readouterr().out


def test_a_database_path_whose_directory_cannot_be_made_exits_2_naming_the_url(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``corral init`` where the file's directory cannot be created (under a regular
    file here): one line naming the url, exit 2, no traceback; the library raises
    ``InvalidInputError`` (a ``CorralError``), not ``OSError``."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    path = blocker / "sub" / "corral.db"
    code = run_main(cli, ["--url", f"sqlite:///{path}", "init"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.splitlines() == [
        f"error: url: cannot create the directory of the SQLite file {path}: Not a directory"
    ]
    with pytest.raises(corral.InvalidInputError) as caught:
        corral.connect(f"sqlite:///{path}")
    assert caught.value.field == "url"


@pytest.mark.parametrize("value", ["-1", "0", "nan", "inf"])
def test_monitor_refuses_a_sleep_that_is_not_a_positive_number(
    corral_cli: CliRun, value: str
) -> None:
    """``corral monitor --max-sleep`` below zero, zero, NaN or infinite: exit 2 with
    one line naming the field (it used to start a monitor that spun or never woke)."""
    assert corral_cli("init")[0] == 0
    code, _, err = corral_cli("monitor", "--max-sleep", value)
    assert code == 2
    assert err.splitlines() == [
        f"error: max_sleep: max_sleep must be a positive number; got {float(value)!r}"
    ]


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://[::1", "an IPv6 address opened with [ is not closed with ]"),
        ("http://127.0.0.1:99999", "the port must be a number from 1 to 65535; got '99999'"),
        ("http://host:abc", "the port must be a number from 1 to 65535; got 'abc'"),
        ("https://host:0/", "the port must be a number from 1 to 65535; got '0'"),
        ("http://", "no host"),
        ("postgresql://[::1", "an IPv6 address opened with [ is not closed with ]"),
        (
            "postgresql://127.0.0.1:99999/x",
            "the port must be a number from 1 to 65535; got '99999'",
        ),
        ("postgres://a:5432,b:x/db", "the port must be a number from 1 to 65535; got 'x'"),
    ],
)
@pytest.mark.parametrize(
    "command",
    [
        ["status"],
        ["task", "add", "x"],
        ["worker", "--id", "W", "--role", "developer", "--", "true"],
    ],
)
def test_a_malformed_url_exits_2_at_once_naming_it(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    url: str,
    why: str,
    command: list[str],
) -> None:
    """No traceback, no connection attempt (a PostgreSQL port out of range used to
    wait 5 s for the pool, then exit 3): one line naming the url, exit 2."""
    monkeypatch.chdir(tmp_path)
    started = time.monotonic()
    code = run_main(cli, ["--url", url, *command])
    elapsed = time.monotonic() - started
    out = capsys.readouterr()
    assert code == 2
    assert out.out == ""
    assert out.err == f"error: url: malformed URL {url!r}: {why}\n"
    assert elapsed < 1.0
    assert list(tmp_path.iterdir()) == []


def test_a_malformed_url_as_a_real_process_and_its_password_hidden(tmp_path: Path) -> None:
    url = "postgresql://corral:s3cret@127.0.0.1:99999/x"
    done = subprocess.run(
        [sys.executable, "-m", "corral", "--url", url, "status"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert done.returncode == 2
    assert done.stderr == (
        "error: url: malformed URL 'postgresql://corral:***@127.0.0.1:99999/x': "
        "the port must be a number from 1 to 65535; got '99999'\n"
    )


def test_well_formed_urls_still_parse() -> None:
    """IPv6 hosts, several PostgreSQL hosts, a socket directory in the query."""
    from corral.store import check_url

    for url in (
        "http://[::1]:8080",
        "https://example.com/prefix",
        "http://user:pw@host:1/",
        "postgresql://[::1]:5432/db",
        "postgresql://a:5432,b,[::1]:5433/db",
        "postgresql:///db?host=/var/run/postgresql",
        "postgres://u:p%40ss@h/db",
        "sqlite:///x.db?synchronous=FULL",
    ):
        assert check_url(url) == url


def test_node_token_without_a_usable_operator_token_exits_2_naming_the_option(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """As for corral serve: no operator token at all, a --token-file that is missing,
    empty or a directory is a usage error (exit 2, one line naming --token-file)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CORRAL_TOKEN", raising=False)
    (tmp_path / "empty").write_text("  \n")
    (tmp_path / "dir").mkdir()
    hint = "set $CORRAL_TOKEN, pass --token-file or run corral init"
    cases = [
        ([], f"no operator token (.corral/token does not exist): {hint}"),
        (["--token-file", "missing"], "missing does not exist"),
        (["--token-file", "empty"], f"no operator token (token file empty is empty): {hint}"),
        (["--token-file", "dir"], "File 'dir' is a directory."),
    ]
    for args, why in cases:
        code = run_main(cli, ["node", "token", "Node-A1", *args])
        err = capsys.readouterr().err
        assert (code, err) == (2, f"error: Invalid value for '--token-file': {why}\n"), args
    (tmp_path / "op").write_text("operator-secret\n")
    assert run_main(cli, ["node", "token", "Node-A1", "--token-file", "op"]) == 0
    assert capsys.readouterr().out.startswith("node.")


def _monitor_process(
    tmp_path: Path, *args: str
) -> tuple[subprocess.Popen[bytes], tuple[Client, Path]]:
    url = f"sqlite:///{tmp_path / 'm.db'}"
    c = corral.connect(url)
    c.register_node("A", "developer", heartbeat_interval=0.1)  # dead after 0.3 s of silence
    c.add_task("Implement the thing")
    c.claim_best_task("A", "developer")
    log = tmp_path / "monitor.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "corral", "--url", url, "monitor", "--max-sleep", "0.1", *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=tmp_path,
        )
    return proc, (c, log)


def _messages(log: Path) -> list[str]:
    """The log lines without their timestamp and logger name."""
    return [line.split(" ", 3)[3] for line in log.read_text().splitlines()]


def test_monitor_verbose_logs_each_pass_that_did_something(tmp_path: Path) -> None:
    """``corral monitor -v``: a line for a pass saying what it recovered, terminated
    and retired, the assessment when one was made, and when the next duty is due
    (it used to log only "monitor started" and "monitor stopped"); a pass that finds
    nothing new is not logged (tests/unit/test_cli_monitor.py)."""
    proc, (c, log) = _monitor_process(tmp_path, "-v")
    try:

        def recovered() -> bool:
            return any("recovered 1 lease," in m for m in _messages(log))

        wait_for(recovered, timeout=30, what="the recovery pass")
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        c.close()
    messages = _messages(log)
    assert messages[0] == "monitor started" and messages[-1] == "monitor stopped"
    passes = [m for m in messages if m.startswith("pass: ")]
    first = next(m for m in passes if "recovered 1 lease," in m)
    assert re.fullmatch(
        r"pass: recovered 1 lease, terminated 1 dead node, retired 0 idle nodes; "
        r"assessment (not due|overloaded -> spawn_developer \(1 pending, 0 working, 0 idle\)); "
        r"next due in \d+\.\ds",
        first,
    ), first
    quiet = [m for m in passes if m is not first]
    assert all(
        re.fullmatch(
            r"pass: recovered 0 leases, terminated 0 dead nodes, retired 0 idle nodes; "
            r"assessment (not due|\w+ -> \w+ \(.*\)); next due in \d+\.\ds",
            m,
        )
        for m in quiet
    ), quiet
    # Every line is a pass, an event the pass logged, start/stop, its election as
    # the file's one monitor (the first pass's, once), or the alert its alerter sent
    # (docs/alerts.md: the node died holding a lease).
    events = {
        "Stale lock recovered: task 1 from A",
        "Marked A as terminated",
        "alert: node A died holding task 1",
    }
    elected = [m for m in messages if m.endswith(" leads the monitors")]
    assert len(elected) == 1, elected
    for m in messages[1:-1]:
        assert m.startswith("pass: ") or any(m.startswith(e) for e in events) or m in elected, m


def test_monitor_without_verbose_logs_events_only(tmp_path: Path) -> None:
    proc, (c, log) = _monitor_process(tmp_path)
    try:
        wait_for(
            lambda: any(m.startswith("Marked A as terminated") for m in _messages(log)),
            timeout=30,
            what="the dead node",
        )
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        c.close()
    assert not [m for m in _messages(log) if m.startswith("pass: ")]


def test_a_pass_that_does_not_lead_says_so() -> None:
    from corral.cli.core import pass_line
    from corral.monitor import TickResult

    line = pass_line(TickResult(leader=False, next_deadline=105.0), 100.0)
    assert line == "pass: another monitor leads, nothing done; next due in 5.0s"


def test_the_cli_help_and_the_user_docs_cite_no_file_the_repository_lacks(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """README.md, ``corral status --help`` and docs/worker.md describe the behaviour
    instead of pointing at documents that are not in the repository."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    assert run_main(cli, ["status", "--help"]) == 0
    texts = {
        "status --help": capsys.readouterr().out,
        "README.md": (root / "README.md").read_text(),
        "docs/worker.md": (root / "docs" / "worker.md").read_text(),
    }
    for name, text in texts.items():
        for cited in ("anti-idle.md", "STEP 1.5", "heartbeat-protocol.md"):
            assert cited not in text, (name, cited)
    assert "task board" in texts["status --help"]
