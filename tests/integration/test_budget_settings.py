"""Budgets set by another process are enforced here (docs/guardrails.md, "Budgets"):
a process trusts its cached "no budgets" for ``sqlusage.SETTINGS_RECHECK`` seconds
at most, so a claim, a completion and a report read nothing more in the common case
and a budget set elsewhere takes effect within that time. Two clients of one store
stand for two processes (each has its own settings cache); the recheck's clock is
advanced, not waited for. SQLite and PostgreSQL."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import corral
from corral.errors import BudgetError
from corral.store import sqldb, sqlusage
from tests.support.backends import postgres as pg

USAGE = {"input_tokens": 1200, "output_tokens": 300, "cost_usd": 0.0123}


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'b.db'}"
    return pg.fresh_database(request)


def test_a_budget_set_by_another_process_is_enforced_within_the_recheck(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    offset = [0.0]  # the recheck's clock stands still but where the test moves it
    start = time.monotonic()
    monkeypatch.setattr(sqldb, "monotonic", lambda: start + offset[0])
    with corral.connect(url) as worker, corral.connect(url) as operator:
        worker.configure(max_agents=8)
        worker.add_tasks([{"title": f"Implement part {i}"} for i in range(6)])
        worker.register_node("dev-1", "developer")
        task = worker.claim_best_task("dev-1", "developer")
        assert task is not None
        _, task = worker.complete_and_claim(
            task.id, "dev-1", "developer", task.epoch, usage=USAGE
        )  # 1,500 tokens; this process has read "no budgets" just now
        assert task is not None
        operator.configure(budgets=[{"scope": "role:developer", "window": "1d", "tokens": 1000}])
        # Within the recheck the worker still trusts its cache: nothing read, claimed.
        _, task = worker.complete_and_claim(task.id, "dev-1", "developer", task.epoch, usage=USAGE)
        assert task is not None
        offset[0] = sqlusage.SETTINGS_RECHECK  # the recheck is due: read, and refused
        done, nothing = worker.complete_and_claim(
            task.id, "dev-1", "developer", task.epoch, usage=USAGE
        )
        assert done.status == "done" and nothing is None  # completed, claimed nothing
        with pytest.raises(BudgetError, match="role:developer budget of 1000 tokens"):
            worker.claim_best_task("dev-1", "developer")
        assert worker.usage("role:developer", "1d").reports == 3  # every report counted
        kinds = [e.kind for e in operator.events()]
        assert "budget_spent" in kinds  # announced by the report that read the budget
