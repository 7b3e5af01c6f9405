"""The SQL claims encode corral.scheduler.policy's order: on random agents (ties,
never-activated, held, per-agent and cluster minimum intervals, due cron overrides,
ids that sort differently by locale), each backend's assignment is the pure
function's, for every mode."""

from __future__ import annotations

import random
import sqlite3
from typing import Any

import psycopg
import pytest

from corral.scheduler.policy import Candidate, pick

NOW = 1_700_000_000.0  # the clock fixture's time
IDS = ["a", "B", "b", "Z9", "a-b", "é", "ab", "_x", "A", "zz", "m", "0"]


def _raw(cluster: Any, request: pytest.FixtureRequest) -> Any:
    """A function running SQL on the cluster's database, outside the store."""
    url = cluster.url
    if url.startswith("sqlite:///"):
        conn = sqlite3.connect(url[len("sqlite:///") :], isolation_level=None)
        request.addfinalizer(conn.close)

        def run(sql: str, params: tuple[Any, ...] = ()) -> None:
            conn.execute(sql.replace("%s", "?"), params)

        return run
    pg = psycopg.connect(url, autocommit=True)
    request.addfinalizer(pg.close)

    def run_pg(sql: str, params: tuple[Any, ...] = ()) -> None:
        pg.execute(sql, params)

    return run_pg


def _random_agents(rng: random.Random) -> list[Candidate]:
    times = [None, NOW - 7200, NOW - 3600, NOW - 3600, NOW - 600, NOW - 1]
    out = []
    for agent_id in rng.sample(IDS, rng.randint(0, len(IDS))):
        out.append(
            Candidate(
                id=agent_id,
                unread=rng.choice([0, 0, 0, 1, 2, 2, 5]),
                last_activated_at=rng.choice(times),
                held=rng.random() < 0.25,
                min_interval=rng.choice([None, None, 0.0, 900.0, 5000.0]),
                next_due_at=rng.choice([None, None, None, NOW - 60, NOW - 60, NOW, NOW + 60]),
            )
        )
    return out


@pytest.mark.parametrize("mode", ["notification", "exploration", "hybrid"])
def test_the_claim_statements_agree_with_the_policy(
    embedded: Any, mode: str, request: pytest.FixtureRequest
) -> None:
    run = _raw(embedded, request)
    embedded.register_node("r1", "runner")
    rng = random.Random(f"sched-{mode}")
    for _ in range(60):
        interval = rng.choice([0.0, 0.0, 1800.0])
        embedded.configure(min_activation_interval=interval)
        run("DELETE FROM activations")
        run("DELETE FROM agents")
        agents = _random_agents(rng)
        for a in agents:
            run(
                "INSERT INTO agents (id, config, unread, last_activated_at, held_by,"
                " min_interval, next_due_at, next_due_task, created_at, updated_at)"
                " VALUES (%s, '{}', %s, %s, %s, %s, %s, %s, %s, %s)",
                (
                    a.id,
                    a.unread,
                    a.last_activated_at,
                    "other" if a.held else None,
                    a.min_interval,
                    a.next_due_at,
                    None if a.next_due_at is None else "t",
                    NOW,
                    NOW,
                ),
            )
        want = pick(agents, mode, NOW, interval)
        got = embedded.get_assignment("r1", mode)
        assert (None if got is None else (got.agent_id, got.kind)) == (
            None if want is None else (want.agent_id, want.kind)
        ), agents
