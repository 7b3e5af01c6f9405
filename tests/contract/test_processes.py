"""Supervised processes in the cluster (docs/supervisor.md, "In the cluster"): each
host's supervisor reports its processes, operators ask for start/stop/restart, the
supervisor reads its requests and acknowledges each as an event."""

from __future__ import annotations

from typing import Any

import pytest

from corral import InvalidInputError, NotFoundError
from corral.clock import FakeClock
from tests.contract._world import T0, kinds, world

OPERATIONS = (
    "report_processes",
    "list_processes",
    "request_process_action",
    "process_actions",
    "ack_process_action",
    "read_state",
)
BAD_INPUT = (
    "report_processes",
    "list_processes",
    "request_process_action",
    "process_actions",
    "ack_process_action",
)

EXIT = {"code": 1, "signal": None, "at": T0 - 5, "describe": "exit code 1", "stderr_tail": ["x"]}


def _proc(agent: str, state: str, pid: int | None = None, **more: Any) -> dict[str, Any]:
    return {"agent": agent, "state": state, "pid": pid, **more}


def test_a_report_replaces_the_hosts_rows_and_records_changes(
    cluster: Any, clock: FakeClock
) -> None:
    first = cluster.report_processes(
        "h1",
        [
            _proc(
                "web",
                "RUNNING",
                100,
                restarts=2,
                started_at=T0 - 10,
                last_beat=T0 - 1,
                flags=[],
                last_exit=EXIT,
            ),
            _proc("db", "STARTING", 101),
        ],
    )
    cluster.report_processes("h2", [_proc("web", "STOPPED", flags=["restart-exhausted"])])
    assert [(p.host, p.agent, p.state, p.pid) for p in first] == [
        ("h1", "db", "STARTING", 101),
        ("h1", "web", "RUNNING", 100),
    ]
    web = first[1]
    assert (web.restarts, web.started_at, web.last_beat, web.last_exit, web.reported_at) == (
        2,
        T0 - 10,
        T0 - 1,
        EXIT,
        T0,
    )
    assert cluster.list_processes() == [*first, cluster.list_processes("h2")[0]]
    assert cluster.list_processes("h2")[0].flags == ["restart-exhausted"]
    assert cluster.list_processes("nowhere") == []
    seq = cluster.events()[-1].seq
    clock.advance(2)
    # Same state for web (pid changed is no transition), db goes RUNNING, cache is new.
    cluster.report_processes(
        "h1", [_proc("web", "RUNNING", 200), _proc("db", "RUNNING", 101), _proc("c", "STOPPED")]
    )
    new = cluster.events(since=seq)
    assert [(e.kind, e.data["agent"], e.data["from"], e.data["to"]) for e in new] == [
        ("process_state", "db", "STARTING", "RUNNING"),
        ("process_state", "c", None, "STOPPED"),
    ]
    assert new[0].data == {
        "host": "h1",
        "agent": "db",
        "from": "STARTING",
        "to": "RUNNING",
        "pid": 101,
        "flags": [],
    }
    assert cluster.list_processes("h1")[2].pid == 200
    seq = new[-1].seq
    cluster.report_processes("h1", [_proc("web", "RUNNING", 200)])
    gone = cluster.events(since=seq)
    assert [(e.kind, e.data) for e in gone] == [
        ("process_removed", {"host": "h1", "agent": "c", "from": "STOPPED"}),
        ("process_removed", {"host": "h1", "agent": "db", "from": "RUNNING"}),
    ]
    assert [p.agent for p in cluster.list_processes("h1")] == ["web"]
    assert cluster.report_processes("h1", []) == []
    assert [p.host for p in cluster.list_processes()] == ["h2"]


def test_a_later_item_for_the_same_agent_wins(cluster: Any) -> None:
    out = cluster.report_processes("h1", [_proc("a", "STARTING", 5), _proc("a", "RUNNING", 5)])
    assert [(p.agent, p.state) for p in out] == [("a", "RUNNING")]


def test_an_action_travels_to_its_host_and_is_acknowledged(cluster: Any, clock: FakeClock) -> None:
    cluster.report_processes("h1", [_proc("web", "RUNNING", 100)])
    cluster.report_processes("h2", [_proc("web", "RUNNING", 300)])
    assert cluster.process_actions("h1") == []
    clock.advance(1)
    req = cluster.request_process_action("h1", "web", "restart")
    other = cluster.request_process_action("h2", "web", "stop")
    again = cluster.request_process_action("h1", "web", "start")
    assert (req.kind, req.ts, req.node_id) == ("process_action_requested", T0 + 1, None)
    assert req.data == {"host": "h1", "agent": "web", "action": "restart", "actor": "operator"}
    assert cluster.process_actions("h1") == [req, again]
    assert cluster.process_actions("h1", since=req.seq) == [again]
    assert cluster.process_actions("h1", limit=1) == [req]
    assert cluster.process_actions("h2") == [other]
    clock.advance(1)
    done = cluster.ack_process_action("h1", req.seq, True, "pid 100 -> 101")
    assert (done.kind, done.ts) == ("process_action_done", T0 + 2)
    assert done.data == {
        "host": "h1",
        "agent": "web",
        "action": "restart",
        "request": req.seq,
        "ok": True,
        "message": "pid 100 -> 101",
        "actor": "operator",  # the request's: the supervisor only answers
    }
    failed = cluster.ack_process_action("h2", other.seq, False)
    assert (failed.data["ok"], failed.data["message"], failed.data["action"]) == (False, "", "stop")
    assert cluster.events()[-2:] == [done, failed]
    assert cluster.process_actions("h1") == [req, again]  # acks are not requests


def test_read_state_shows_every_hosts_processes(cluster: Any) -> None:
    plain = cluster.read_state()
    assert plain.processes == [] and "Processes" not in plain.text
    cluster.report_processes(
        "h2", [_proc("web", "STOPPED", restarts=10, flags=["restart-exhausted"])]
    )
    cluster.report_processes("h1", [_proc("web", "RUNNING", 100, restarts=1)])
    state = cluster.read_state()
    assert state.processes == cluster.list_processes()
    assert state.to_dict()["processes"] == [p.to_dict() for p in cluster.list_processes()]
    text = state.text
    before, _, section = text.partition("\n**Processes:**\n")
    assert before.count("\n") == plain.text.count("\n")  # the rest is as it was
    assert section == (
        "h1:\n"
        "  web [RUNNING] pid 100 | restarts 1\n"
        "h2:\n"
        "  web [STOPPED] pid - | restarts 10 | restart-exhausted"
    )
    assert cluster.read_state_text() == text


def test_unknown_targets_are_not_found_and_change_nothing(cluster: Any) -> None:
    cluster.report_processes("h1", [_proc("web", "RUNNING", 100)])
    before = world(cluster)
    with pytest.raises(NotFoundError) as exc:
        cluster.request_process_action("h1", "db", "restart")
    assert exc.value.field == "agent"
    with pytest.raises(NotFoundError) as exc:
        cluster.request_process_action("h9", "web", "restart")
    assert exc.value.field == "host"
    req = cluster.request_process_action("h1", "web", "stop")
    before = world(cluster)
    for host, seq in (("h2", req.seq), ("h1", req.seq + 10_000), ("h1", 1)):
        with pytest.raises(NotFoundError) as exc:
            cluster.ack_process_action(host, seq, True)
        assert exc.value.field == "request_seq"
    assert world(cluster) == before


_OK = [_proc("web", "RUNNING", 100)]


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda c: c.report_processes("bad\nhost", _OK), "host"),
        (lambda c: c.report_processes("h1", {"web": "RUNNING"}), "processes"),
        (lambda c: c.report_processes("h1", ["web"]), "processes"),
        (lambda c: c.report_processes("h1", [{"state": "RUNNING"}]), "processes"),
        (lambda c: c.report_processes("h1", [_proc("web", "DEAD")]), "processes"),
        (lambda c: c.report_processes("h1", [_proc("bad\nid", "RUNNING")]), "processes"),
        (lambda c: c.report_processes("h1", [_proc("web", "RUNNING", 0)]), "processes"),
        (lambda c: c.report_processes("h1", [_proc("web", "RUNNING", restarts=-1)]), "processes"),
        (
            lambda c: c.report_processes("h1", [_proc("web", "RUNNING", started_at="now")]),
            "processes",
        ),
        (lambda c: c.report_processes("h1", [_proc("web", "RUNNING", flags="x")]), "processes"),
        (lambda c: c.report_processes("h1", [_proc("web", "RUNNING", last_exit=3)]), "processes"),
        (lambda c: c.report_processes("h1", [_proc("web", "RUNNING", color="red")]), "processes"),
        (
            lambda c: c.report_processes("h1", [_proc(f"a{i}", "STOPPED") for i in range(10_001)]),
            "processes",
        ),
        (lambda c: c.list_processes("bad\nhost"), "host"),
        (lambda c: c.request_process_action("h1", "web", "kill"), "action"),
        (lambda c: c.request_process_action("h1", "bad\nid", "stop"), "agent"),
        (lambda c: c.request_process_action("", "web", "stop"), "host"),
        (lambda c: c.process_actions("bad\nhost"), "host"),
        (lambda c: c.process_actions("h1", since=-1), "since"),
        (lambda c: c.process_actions("h1", limit=0), "limit"),
        (lambda c: c.ack_process_action("h1", -1, True), "request_seq"),
        (lambda c: c.ack_process_action("h1", 1, "yes"), "ok"),
        (lambda c: c.ack_process_action("h1", 1, True, "m" * 20_001), "message"),
        (lambda c: c.ack_process_action("bad\nhost", 1, True), "host"),
    ],
)
def test_process_operations_refuse_bad_input(cluster: Any, call: Any, field: str) -> None:
    cluster.report_processes("h1", _OK)
    before = world(cluster)
    with pytest.raises(InvalidInputError) as exc:
        call(cluster)
    assert exc.value.field == field
    assert world(cluster) == before
    assert kinds(cluster)[-1] == "process_state"
