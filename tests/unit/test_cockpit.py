"""corral.cockpit: what every operator's view shows, from operations' answers and
``now`` (pure)."""

from __future__ import annotations

from corral import cockpit
from corral.model import State, Task
from corral.store.stats import ClusterStats

NOW = 1_700_000_000.0


def _state(**kwargs: object) -> State:
    base: dict[str, object] = {
        "now": NOW,
        "summary": "",
        "tasks": [],
        "tasks_omitted": 0,
        "nodes": [],
        "max_agents": 4,
        "pending_tasks": 0,
        "in_progress": 0,
        "metadata": {},
        "work_distribution": {},
        "last_event_ts": None,
        "last_heartbeat": None,
    }
    base.update(kwargs)
    return State(**base)  # type: ignore[arg-type]


def _pending(age: float) -> Task:
    return Task(id=1, title="t", priority="low", status="pending", created_at=NOW - age)


def test_age_reads_as_a_person_reads_it() -> None:
    assert [cockpit.age(s) for s in (None, -3, 4.9, 119, 120, 3599, 3600, 7500, 90000)] == [
        "—",
        "0 s",
        "4 s",
        "119 s",
        "2 min",
        "59 min",
        "1 h",
        "2 h 5 min",
        "1 d",
    ]
    assert (cockpit.ago(NOW - 5, NOW), cockpit.ago(None, NOW)) == ("5 s ago", "—")


def test_the_fleet_figures_are_the_answers_counts() -> None:
    stats = ClusterStats(
        tasks={"pending": 3, "in_progress": 2, "done": 40},
        finished_last_hour={"done": 7, "failed": 1},
        lease_recoveries=2,
        last_recovery=NOW - 300,
        max_agents=4,
        live_nodes=[{"id": "a"}, {"id": "b"}],
    )
    state = _state(
        work_distribution={
            "workload_status": "overloaded",
            "spawn_recommendation": "spawn_developer",
            "last_assessment": NOW - 12,
        },
        metadata={
            "pending_task_count": 3,
            "active_agent_count": 2,
            "idle_agent_count": 0,
            "max_agents": 4,
            "manager_id": "m1",
            "ask_user": False,
        },
    )
    f = cockpit.fleet(stats, state, [_pending(60), _pending(600)], NOW)
    assert (f.live, f.max_agents, f.pending, f.in_progress) == (2, 4, 3, 2)
    assert (f.done_last_hour, f.failed_last_hour) == (7, 1)
    assert (f.oldest_pending, f.oldest_at_least) == (600, True)  # 2 of 3 pending read
    assert (f.last_recovery, f.recoveries) == (300, 2)
    assert (f.status, f.recommendation, f.assessed, f.manager) == (
        "overloaded",
        "spawn_developer",
        12,
        "m1",
    )
    assert f.basis == {
        "pending_task_count": 3,
        "active_agent_count": 2,
        "idle_agent_count": 0,
        "max_agents": 4,
    }


def test_a_fleet_never_assessed_or_recovered_says_none() -> None:
    f = cockpit.fleet(ClusterStats(max_agents=4), _state(), [], NOW)
    assert (f.status, f.recommendation, f.assessed, f.last_recovery) == (None, None, None, None)
    assert (f.oldest_pending, f.oldest_at_least, f.basis, f.manager) == (None, False, {}, None)


def test_a_process_row_from_a_supervisor_or_a_record_reads_the_same() -> None:
    """A supervisor's ``status`` gives ``uptime``; a ``Process`` record gives
    ``started_at`` (the uptime counted from it while it runs); a stopped one says its
    last exit, a waiting one what it waits on."""
    supervisor = {"agent": "web", "state": "RUNNING", "pid": 10, "uptime": 3900.0}
    record = {"host": "h1", "agent": "web", "state": "RUNNING", "pid": 10}
    record |= {"started_at": NOW - 3900, "last_beat": NOW - 2}
    a, b = cockpit.process_row(supervisor, NOW), cockpit.process_row(record, NOW)
    assert (a.uptime, b.uptime, a.pid, b.host, b.last_beat) == (
        "1h 05m",
        "1h 05m",
        "10",
        "h1",
        "2 s ago",
    )
    stopped = {"agent": "db", "state": "STOPPED", "restarts": 10, "flags": ["restart-exhausted"]}
    stopped["last_exit"] = {"code": 1, "signal": None}
    row = cockpit.process_row(stopped, NOW)
    assert (row.pid, row.uptime, row.restarts) == ("—", "—", "10")
    assert row.note == "restart-exhausted; last exit: exit code 1"
    waiting = {"agent": "user", "state": "WAITING", "waiting_on": ["relay"]}
    assert cockpit.process_row(waiting, NOW).note == "waiting on relay"
