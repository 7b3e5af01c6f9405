"""Workflow runs in the cluster: hosts declare the workflows they serve and take their
work; a run's idle state follows its host's reports; idle runs are released by policy
(delay, per-host cap) or by an operator's Release, and resume on one host when an
event, a waiter deadline or an operator's Resume comes."""

from __future__ import annotations

from typing import Any

import pytest

from corral import ConflictError, InvalidInputError, LeaseError, NotFoundError
from corral.clock import FakeClock
from tests.contract._world import T0, kinds

OPERATIONS = (
    "serve_workflows",
    "take_workflow_work",
    "report_handler",
    "report_steps",
    "release_handler",
    "run_workflow",
    "get_handler",
    "send_event",
    "list_handlers",
    "release_workflow",
    "resume_workflow",
    "configure",
)
BAD_INPUT = (
    "serve_workflows",
    "take_workflow_work",
    "report_handler",
    "report_steps",
    "release_handler",
    "run_workflow",
    "get_handler",
    "send_event",
    "list_handlers",
    "release_workflow",
    "resume_workflow",
)

WAIT = {"step": "ask", "event_type": "Answer", "waiter_id": "w1", "deadline": None}


def wf_world(c: Any) -> tuple[Any, ...]:
    return (
        [h.to_dict() for h in c.list_handlers(limit=10_000)],
        [e.to_dict() for e in c.events(limit=10_000)],
        c.settings(),
    )


def started(c: Any, host: str = "h1", workflow: str = "hitl", **kwargs: Any) -> str:
    """A run of ``workflow`` taken by ``host``."""
    handler_id = c.run_workflow(workflow, **kwargs)
    work = c.take_workflow_work(host)
    assert handler_id in [r.handler.handler_id for r in work.runs]
    return str(handler_id)


def idle(c: Any, handler_id: str, host: str = "h1", **wait: Any) -> Any:
    return c.report_handler(host, handler_id, "idle", [{**WAIT, **wait}])


@pytest.fixture
def hosts(cluster: Any) -> Any:
    cluster.serve_workflows("h1", [{"name": "hitl"}])
    cluster.serve_workflows("h2", [{"name": "hitl"}, {"name": "other"}])
    return cluster


def test_a_run_goes_to_one_host_serving_its_workflow(hosts: Any) -> None:
    c = hosts
    assert [(w.workflow, w.idle_release_after) for w in c.serve_workflows("h3", [])] == []
    handler_id = c.run_workflow("other", question="why?")
    h = c.get_handler(handler_id)
    assert (h.status, h.host, h.idle_since, h.workflow) == ("running", None, None, "other")
    assert c.take_workflow_work("h1").runs == []  # h1 does not serve it
    work = c.take_workflow_work("h2")
    assert [(r.handler.handler_id, r.start, r.checkpoint) for r in work.runs] == [
        (handler_id, {"question": "why?"}, None)
    ]
    assert c.take_workflow_work("h2").runs == []  # taken once
    assert c.get_handler(handler_id).host == "h2"
    assert "workflow_started" in kinds(c)


def test_idle_since_follows_the_reported_transitions(hosts: Any, clock: FakeClock) -> None:
    c = hosts
    handler_id = started(c)
    clock.advance(1)
    h = idle(c, handler_id, deadline=T0 + 50)
    assert (h.idle_since, h.wake_at) == (T0 + 1, T0 + 50)
    assert h.active_waiters == [{**WAIT, "deadline": T0 + 50}]
    assert h.to_dict()["idle_since"] == "2023-11-14T22:13:21+00:00"
    clock.advance(1)
    assert idle(c, handler_id).idle_since == T0 + 1  # still the same idle spell
    assert kinds(c).count("workflow_idle") == 1
    assert c.report_handler("h1", handler_id, "busy").idle_since is None
    assert kinds(c)[-1] == "workflow_resumed"
    clock.advance(1)
    assert idle(c, handler_id).idle_since == T0 + 3
    assert kinds(c).count("workflow_idle") == 2


def test_raw_step_state_is_judged_by_the_idle_rule(hosts: Any, clock: FakeClock) -> None:
    """A host may report its steps' queues, work and waits: corral decides."""
    c = hosts
    handler_id = started(c)
    wait = {"event_type": "Answer", "waiter_id": "w", "deadline": T0 + 9}
    busy = {"ask": {"queue": 1, "waiters": [wait]}, "other": {}}
    assert c.report_steps("h1", handler_id, busy).idle_since is None
    clock.advance(1)
    idle_steps = {"ask": {"waiters": [wait]}, "other": {"queue": 0, "in_progress": 0}}
    h = c.report_steps("h1", handler_id, idle_steps)
    assert (h.idle_since, h.wake_at) == (T0 + 1, T0 + 9)
    assert h.active_waiters == [{"step": "ask", **wait}]
    backoff = {"ask": {"waiters": [wait]}, "retrying": {"backoff": 1}}
    assert c.report_steps("h1", handler_id, backoff).idle_since is None
    assert kinds(c)[-2:] == ["workflow_idle", "workflow_resumed"]


def test_list_handlers_filters_and_orders(hosts: Any, clock: FakeClock) -> None:
    c = hosts
    a = started(c, "h1")
    b = started(c, "h2", "other")
    d = started(c, "h2")
    busy = started(c, "h1")
    idle(c, d, "h2")
    clock.advance(10)
    idle(c, a)
    clock.advance(5)
    idle(c, b, "h2")
    clock.advance(1)

    def ids(**kw: Any) -> list[str]:
        return [h.handler_id for h in c.list_handlers(**kw)]

    assert ids(idle=True) == [d, a, b]  # longest idle first
    assert ids(status="running", idle=True, idle_duration_gt=5) == [d, a]
    assert ids(idle=True, host="h2") == [d, b]
    assert ids(idle=True, workflow="other") == [b]
    assert ids(idle=False) == [busy]
    assert ids(idle=False, idle_duration_gt=1) == []
    assert sorted(ids()) == sorted([a, b, d, busy])
    assert ids(status="completed") == []
    assert ids(idle=True, limit=1) == [d]


def test_an_idle_run_is_released_then_resumed_by_an_event_on_one_host(
    hosts: Any, clock: FakeClock
) -> None:
    c = hosts
    c.configure(idle_release_after=10)
    handler_id = started(c)
    idle(c, handler_id)
    clock.advance(10)
    assert c.take_workflow_work("h1").release == []  # not longer than 10 s yet
    clock.advance(1)
    assert c.take_workflow_work("h1").release == [handler_id]
    h = c.release_handler("h1", handler_id, {"state": [1, 2]})
    assert (h.status, h.host, h.idle_since, h.released_at) == ("released", None, T0, T0 + 11)
    assert c.list_handlers(status="released", idle=True)[0].handler_id == handler_id
    assert c.take_workflow_work("h2").runs == []  # nothing due yet
    c.send_event(handler_id, "Answer", {"text": "yes"})
    work = c.take_workflow_work("h2")
    assert [(r.handler.handler_id, r.checkpoint) for r in work.runs] == [
        (handler_id, {"state": [1, 2]})
    ]
    assert [(d.handler_id, d.event_type, d.data) for d in work.deliveries] == [
        (handler_id, "Answer", {"text": "yes"})
    ]
    assert c.take_workflow_work("h1").runs == []  # never on two hosts
    h = c.get_handler(handler_id)
    assert (h.status, h.host, h.resumes, h.idle_since) == ("running", "h2", 1, None)
    assert kinds(c)[-2:] == ["workflow_released", "workflow_resumed"]


def test_events_reach_the_host_running_the_run(hosts: Any) -> None:
    c = hosts
    handler_id = started(c)
    c.send_event(handler_id, "Answer")
    assert c.take_workflow_work("h2").deliveries == []
    got = c.take_workflow_work("h1").deliveries
    assert [(d.event_type, d.data) for d in got] == [("Answer", {})]
    assert c.take_workflow_work("h1").deliveries == []  # delivered once


def test_a_released_run_is_due_at_its_earliest_waiter_deadline(
    hosts: Any, clock: FakeClock
) -> None:
    c = hosts
    handler_id = started(c)
    c.report_handler(
        "h1",
        handler_id,
        "idle",
        [{**WAIT, "deadline": T0 + 100}, {**WAIT, "waiter_id": "w2", "deadline": T0 + 80}],
    )
    assert c.release_handler("h1", handler_id, {}).wake_at == T0 + 80
    clock.advance(79)
    assert c.take_workflow_work("h2").runs == []
    clock.advance(1)
    assert [r.handler.handler_id for r in c.take_workflow_work("h2").runs] == [handler_id]


def test_the_oldest_idle_runs_beyond_max_resident_idle_are_released(
    hosts: Any, clock: FakeClock
) -> None:
    c = hosts
    c.configure(max_resident_idle=2)
    runs = [started(c) for _ in range(3)]
    for r in reversed(runs):
        idle(c, r)
        clock.advance(1)
    assert c.take_workflow_work("h1").release == [runs[2]]


def test_a_hosts_own_release_delay_overrides_the_clusters(cluster: Any, clock: FakeClock) -> None:
    c = cluster
    served = c.serve_workflows("h1", [{"name": "hitl", "idle_release_after": 5}])
    assert [(w.workflow, w.host, w.idle_release_after) for w in served] == [("hitl", "h1", 5.0)]
    handler_id = started(c)
    idle(c, handler_id)
    clock.advance(6)
    assert c.take_workflow_work("h1").release == [handler_id]


def test_a_finished_run_keeps_its_result_and_takes_no_event(hosts: Any) -> None:
    c = hosts
    ok, bad = started(c), started(c)
    h = c.report_handler("h1", ok, "completed", result={"answer": 42})
    assert (h.status, h.result, h.finished_at is not None) == ("completed", {"answer": 42}, True)
    assert c.report_handler("h1", bad, "failed", error="boom").error == "boom"
    assert kinds(c)[-1] == "workflow_finished"
    before = wf_world(c)
    with pytest.raises(InvalidInputError) as exc:
        c.send_event(ok, "Answer")
    assert exc.value.field == "handler_id"
    assert wf_world(c) == before


def test_a_resident_run_says_why_and_is_not_released(hosts: Any, clock: FakeClock) -> None:
    c = hosts
    c.configure(idle_release_after=1)
    handler_id = started(c)
    idle(c, handler_id)
    h = c.report_handler("h1", handler_id, "resident", reason="child runs cannot checkpoint")
    assert h.resident_reason == "child runs cannot checkpoint"
    clock.advance(5)
    assert c.take_workflow_work("h1").release == []


def test_only_the_running_host_reports_and_only_idle_runs_release(hosts: Any) -> None:
    c = hosts
    handler_id = started(c)
    before = wf_world(c)
    with pytest.raises(LeaseError):
        c.report_handler("h2", handler_id, "idle", [WAIT])
    with pytest.raises(LeaseError):
        c.release_handler("h1", handler_id, {})  # busy
    assert wf_world(c) == before
    idle(c, handler_id)
    c.send_event(handler_id, "Answer")
    before = wf_world(c)
    with pytest.raises(LeaseError):
        c.release_handler("h1", handler_id, {})  # an event waits for it
    assert wf_world(c) == before


def test_unknown_handlers_hosts_and_workflows_are_not_found(hosts: Any, clock: FakeClock) -> None:
    c = hosts
    before = wf_world(c)
    with pytest.raises(NotFoundError) as exc:
        c.get_handler("nope")
    assert exc.value.field == "handler_id"
    with pytest.raises(NotFoundError) as exc:
        c.run_workflow("unserved")
    assert exc.value.field == "workflow"
    with pytest.raises(NotFoundError) as exc:
        c.take_workflow_work("h9")
    assert exc.value.field == "host"
    assert wf_world(c) == before
    clock.advance(31)  # the hosts have not polled for longer than the window
    with pytest.raises(NotFoundError):
        c.run_workflow("hitl")


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda c, h: c.serve_workflows("bad\nhost", []), "host"),
        (lambda c, h: c.serve_workflows("h1", {"name": "x"}), "workflows"),
        (lambda c, h: c.serve_workflows("h1", [{"nom": "x"}]), "workflows"),
        (lambda c, h: c.serve_workflows("h1", [{"name": ""}]), "workflows"),
        (
            lambda c, h: c.serve_workflows("h1", [{"name": "x", "idle_release_after": 0}]),
            "idle_release_after",
        ),
        (lambda c, h: c.take_workflow_work("bad\nhost"), "host"),
        (lambda c, h: c.take_workflow_work("h1", limit=0), "limit"),
        (lambda c, h: c.report_handler("h1", h, "asleep"), "state"),
        (lambda c, h: c.report_handler("h1", "bad\nid", "busy"), "handler_id"),
        (lambda c, h: c.report_handler("h1", h, "idle", {"step": "a"}), "waiters"),
        (lambda c, h: c.report_handler("h1", h, "idle", [{"step": "a"}]), "waiters"),
        (lambda c, h: c.report_handler("h1", h, "idle", [{**WAIT, "deadline": "soon"}]), "waiters"),
        (lambda c, h: c.report_handler("h1", h, "resident", reason=""), "reason"),
        (lambda c, h: c.report_handler("h1", h, "failed", error=3), "error"),
        (lambda c, h: c.release_handler("h1", h, [1]), "checkpoint"),
        (lambda c, h: c.release_handler("bad\nhost", h, {}), "host"),
        (lambda c, h: c.run_workflow("bad\nname"), "workflow"),
        (lambda c, h: c.run_workflow("hitl", x=float("nan")), "kwargs"),
        (lambda c, h: c.get_handler(""), "handler_id"),
        (lambda c, h: c.send_event(h, "not a class"), "event_type"),
        (lambda c, h: c.send_event(h, "Answer", [1]), "data"),
        (lambda c, h: c.send_event("bad\nid", "Answer"), "handler_id"),
        (lambda c, h: c.report_steps("h1", h, [1]), "steps"),
        (lambda c, h: c.report_steps("h1", h, {"a": {"queue": -1}}), "steps"),
        (lambda c, h: c.report_steps("h1", h, {"a": {"color": 1}}), "steps"),
        (lambda c, h: c.report_steps("h1", h, {"a": {"waiters": [{}]}}), "waiters"),
        (lambda c, h: c.report_steps("bad\nhost", h, {}), "host"),
        (lambda c, h: c.list_handlers(status="asleep"), "status"),
        (lambda c, h: c.list_handlers(idle="yes"), "idle"),
        (lambda c, h: c.list_handlers(idle_duration_gt=-1), "idle_duration_gt"),
        (lambda c, h: c.list_handlers(workflow="bad\nname"), "workflow"),
        (lambda c, h: c.list_handlers(host="bad\nhost"), "host"),
        (lambda c, h: c.list_handlers(limit=0), "limit"),
        (lambda c, h: c.release_workflow(""), "handler_id"),
        (lambda c, h: c.release_workflow("bad\nid"), "handler_id"),
        (lambda c, h: c.release_workflow(7), "handler_id"),
        (lambda c, h: c.resume_workflow(""), "handler_id"),
        (lambda c, h: c.resume_workflow("bad\nid"), "handler_id"),
    ],
)
def test_workflow_operations_refuse_bad_input(hosts: Any, call: Any, field: str) -> None:
    handler_id = started(hosts)
    before = wf_world(hosts)
    with pytest.raises(InvalidInputError) as exc:
        call(hosts, handler_id)
    assert exc.value.field == field
    assert wf_world(hosts) == before


# --- the operator's Release and Resume ----------------------------------------------------
def _last(c: Any, kind: str) -> Any:
    return [e for e in c.events(limit=10_000) if e.kind == kind][-1]


def test_release_workflow_has_the_host_release_an_idle_run_before_its_delay(
    hosts: Any, clock: FakeClock
) -> None:
    """An operator's Release: the host's next take lists the run whatever its delay,
    the event names the actor, and the release itself ends the request."""
    c = hosts
    c.configure(idle_release_after=300)
    handler_id = started(c)
    idle(c, handler_id)
    clock.advance(2)
    assert c.take_workflow_work("h1").release == []  # 2 s of a 300 s delay
    h = c.release_workflow(handler_id)
    assert (h.status, h.host, h.release_requested_at) == ("running", "h1", T0 + 2)
    assert c.get_handler(handler_id).release_requested_at == T0 + 2
    event = _last(c, "workflow_release_requested")
    assert event.data == {
        "handler_id": handler_id,
        "workflow": "hitl",
        "host": "h1",
        "actor": "operator",
    }
    assert c.take_workflow_work("h2").release == []  # only the host running it
    assert c.take_workflow_work("h1").release == [handler_id]
    assert c.take_workflow_work("h1").release == [handler_id]  # until it is released
    released = c.release_handler("h1", handler_id, {"state": 1})
    assert (released.status, released.release_requested_at) == ("released", None)
    assert kinds(c)[-1] == "workflow_released"


def test_a_release_request_ends_when_the_run_gets_work_again(hosts: Any, clock: FakeClock) -> None:
    """An event reaching the run first makes it busy: the request is over, and the run
    idle again is released by the policy only."""
    c = hosts
    c.configure(idle_release_after=300)
    handler_id = started(c)
    idle(c, handler_id)
    c.release_workflow(handler_id)
    c.send_event(handler_id, "Answer")
    work = c.take_workflow_work("h1")
    assert (len(work.deliveries), work.release) == (1, [])  # the event goes first
    assert c.report_handler("h1", handler_id, "busy").release_requested_at is None
    clock.advance(1)
    assert idle(c, handler_id).release_requested_at is None
    assert c.take_workflow_work("h1").release == []


def test_a_release_request_ends_when_the_run_is_kept_resident(hosts: Any) -> None:
    """A host that cannot checkpoint the run says so: the request is over and the run,
    resident, is refused a new one."""
    c = hosts
    handler_id = started(c)
    idle(c, handler_id)
    c.release_workflow(handler_id)
    h = c.report_handler("h1", handler_id, "resident", reason="child runs cannot checkpoint")
    assert (h.resident_reason, h.release_requested_at) == ("child runs cannot checkpoint", None)
    assert c.take_workflow_work("h1").release == []
    before = wf_world(c)
    with pytest.raises(ConflictError) as exc:
        c.release_workflow(handler_id)
    assert exc.value.field == "handler_id" and "resident" in exc.value.message
    assert wf_world(c) == before


def test_release_workflow_refuses_a_run_not_idle_on_a_host(hosts: Any) -> None:
    """Busy, not yet taken, released, finished, or asked for already: ConflictError
    naming the run's state, and nothing changes."""
    c = hosts
    busy = started(c)
    waiting = c.run_workflow("other")  # no host has taken it
    released = started(c)
    idle(c, released)
    c.release_handler("h1", released, {})
    done = started(c)
    c.report_handler("h1", done, "completed", result=1)
    asked = started(c)
    idle(c, asked)
    c.release_workflow(asked)
    before = wf_world(c)
    for handler_id, words in (
        (busy, "busy"),
        (waiting, "not yet taken"),
        (released, "is released"),
        (done, "is completed"),
        (asked, "asked for already"),
    ):
        with pytest.raises(ConflictError) as exc:
            c.release_workflow(handler_id)
        assert exc.value.field == "handler_id" and words in exc.value.message, exc.value.message
    with pytest.raises(NotFoundError) as missing:
        c.release_workflow("nope")
    assert missing.value.field == "handler_id"
    assert wf_world(c) == before


def test_resume_workflow_makes_a_released_run_due_without_an_event(
    hosts: Any, clock: FakeClock
) -> None:
    """An operator's Resume: the next host serving its workflow restores the run from
    its checkpoint with no event to deliver; the event names the actor."""
    c = hosts
    handler_id = started(c)
    idle(c, handler_id)
    c.release_handler("h1", handler_id, {"state": [1]})
    clock.advance(5)
    assert c.take_workflow_work("h2").runs == []  # nothing due: no event, no deadline
    h = c.resume_workflow(handler_id)
    assert h.status == "released"  # until a host takes it
    event = _last(c, "workflow_resume_requested")
    assert event.data == {"handler_id": handler_id, "workflow": "hitl", "actor": "operator"}
    work = c.take_workflow_work("h2")
    assert [(r.handler.handler_id, r.checkpoint) for r in work.runs] == [
        (handler_id, {"state": [1]})
    ]
    assert work.deliveries == []
    assert c.take_workflow_work("h1").runs == []  # on one host only
    h = c.get_handler(handler_id)
    assert (h.status, h.host, h.resumes, h.idle_since) == ("running", "h2", 1, None)
    assert kinds(c)[-2:] == ["workflow_resume_requested", "workflow_resumed"]


def test_resume_workflow_refuses_a_run_that_is_not_released(hosts: Any) -> None:
    c = hosts
    running = started(c)
    idle_run = started(c)
    idle(c, idle_run)
    done = started(c)
    c.report_handler("h1", done, "failed", error="boom")
    before = wf_world(c)
    for handler_id, words in ((running, "busy"), (idle_run, "idle"), (done, "is failed")):
        with pytest.raises(ConflictError) as exc:
            c.resume_workflow(handler_id)
        assert exc.value.field == "handler_id" and words in exc.value.message, exc.value.message
        assert "only a released run" in exc.value.message
    with pytest.raises(NotFoundError):
        c.resume_workflow("nope")
    assert wf_world(c) == before
