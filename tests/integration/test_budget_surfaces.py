"""A spent budget and bad usage on the surfaces the contract suite does not run:
the MCP tools (the SDK's client, in-process) and the CLI (exit codes, one line).
HTTP, SQLite and PostgreSQL are tests/contract/test_usage.py's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import corral
from corral.cli import cli
from corral.cli._common import run_main
from tests.integration.test_mcp_tools import Call, run


def _spend(c: corral.Client) -> None:
    """dev-1's role spends its 1h budget of 10 tokens on task 1; task 2 waits."""
    c.configure(budgets=[{"scope": "role:developer", "window": "1h", "tokens": 10}])
    c.register_node("dev-1", "developer")
    c.add_task("Implement the parser")
    c.add_task("Implement the printer")
    task = c.claim_best_task("dev-1", "developer")
    assert task is not None
    c.complete_task(task.id, "dev-1", epoch=task.epoch, usage={"output_tokens": 10})


def test_mcp_a_spent_budget_is_an_error_answer_naming_it(sqlite_cluster: corral.Cluster) -> None:
    """claim_best_task answers ``ERROR:`` naming the budget and when it frees; bad
    usage on complete_task is an ``ERROR:`` with the rule's message; ``usage`` answers
    one line; a heartbeat's usage counts for its node."""
    _spend(sqlite_cluster)

    async def script(call: Call, client: object) -> None:
        error, text = await call("claim_best_task", agent_id="dev-1", role="developer")
        assert error and text.startswith("ERROR: role:developer budget of 10 tokens"), text
        assert "frees at 1700002800" in text
        error, text = await call("complete_task", agent_id="dev-1", task_id=1, usage={"tokens": 1})
        assert error and text.startswith("ERROR:") and "usage" in text, text
        assert await call("usage", scope="role:developer", window="1h") == (
            False,
            "Usage of role:developer (1h): 0 in, 10 out tokens, $0, 1 reports",
        )
        assert await call("heartbeat", agent_id="dev-1", usage={"input_tokens": 7}) == (
            False,
            "Heartbeat recorded for dev-1",
        )
        assert (await call("usage", scope="node:dev-1"))[1].startswith(
            "Usage of node:dev-1 (1d): 7 in"
        )

    run(sqlite_cluster, script)


def test_cli_a_spent_budget_exits_1_and_bad_usage_exits_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``corral task claim`` under a spent budget: exit 1, the budget named;
    ``corral task complete --usage`` with a bad field: exit 2, one line naming it;
    ``corral usage`` prints the sums."""
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    monkeypatch.setenv("CORRAL_URL", url)
    monkeypatch.chdir(tmp_path)
    with corral.connect(url) as c:
        _spend(c)
    code = run_main(cli, ["task", "claim", "dev-1", "developer"])
    err = capsys.readouterr().err
    assert code == 1 and "role:developer budget of 10 tokens per 1h is spent" in err, err
    code = run_main(cli, ["task", "complete", "1", "dev-1", "--usage", '{"input_tokens": -1}'])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "usage.input_tokens" in err, err
    code = run_main(cli, ["usage", "--scope", "node:dev-1", "--window", "1d", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and (out["output_tokens"], out["reports"]) == (10, 1)


def test_a_keyed_complete_and_claim_over_http_records_its_usage_once(tmp_path: Path) -> None:
    """The worker's keyed finish-then-next (an idempotency key, ``corral.outage``)
    over a real ``corral serve``: the usage is recorded with the completion, and the
    call sent again with its key records nothing more."""
    from corral.remote import HttpClient
    from tests.support.served import TOKEN, corral_serve

    with corral_serve(tmp_path) as base, corral.connect(base, token=TOKEN) as c:
        assert isinstance(c, HttpClient)
        c.register_node("dev-1", "developer")
        c.add_task("Implement the parser")
        c.add_task("Implement the printer")
        task = c.claim_best_task("dev-1", "developer")
        assert task is not None
        for _ in range(2):  # the second is the same call sent again
            with c.keyed("k-1"):
                done, nxt = c.complete_and_claim(
                    task.id, "dev-1", "developer", task.epoch, usage={"input_tokens": 42}
                )
            assert done.status == "done" and nxt is not None
        u = c.usage(f"task:{task.id}", "1d")
        assert (u.input_tokens, u.reports) == (42, 1)
