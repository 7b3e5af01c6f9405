"""Re-attaching to the children of a supervisor that crashed (or was SIGKILLed).

:func:`recover` runs once when :meth:`Supervisor.run` starts:

1. Each agent recorded in ``pids.json`` with a pid whose start time still matches
   (:func:`~corral.supervisor.process.same_process`, checked after a pidfd was
   opened, so the check cannot race a pid reuse) is adopted: watched through the
   new pidfd, its state, restarts and flags kept, never restarted. A pid now used
   by an unrelated process is never adopted (nor signalled). Its output still flows
   through the log daemon, and a pipe-heartbeat agent whose stdout the log daemon
   still holds keeps being read (its heartbeat timeout counts from the adoption).
2. An agent whose recorded process is gone died while no supervisor watched it:
   its exit status is unknown (the new supervisor is not its parent, and not its
   subreaper ancestor either: the kernel gave the status to whoever reaped it), and
   its restart policy is applied as for any failure. An agent recorded STOPPED
   stays STOPPED (an operator stop, a finished one-shot, an exhausted agent).
3. Processes carrying this state dir's marker that step 1 did not account for are
   orphans (a ``pids.json`` write lost in the crash, or descendants that escaped
   their group). With ``orphans = "adopt"`` an agent's own process (the leader of
   its session, as every spawned agent is) is adopted when that agent has no
   process; every other orphan is killed. ``orphans = "kill"`` kills them all.
"""

from __future__ import annotations

import os
import signal
from typing import TYPE_CHECKING, Any

import psutil

from corral.supervisor import process as proc
from corral.supervisor.policy import EXHAUSTED_FLAG, Exit, State

if TYPE_CHECKING:
    from corral.supervisor.agent import _Agent
    from corral.supervisor.supervisor import Supervisor

__all__ = ["recover"]

_LIVE = {State.STARTING.value, State.RUNNING.value, State.WAITING.value, State.UNHEALTHY.value}


def recover(sup: Supervisor) -> None:
    """Adopt live children, apply policies to dead ones, handle orphans."""
    records = sup.pidfile.load().get("agents", {})
    now = sup.clock()
    for agent_id, a in sup.agents.items():
        rec = records.get(agent_id)
        if isinstance(rec, dict):
            _recover_agent(sup, a, rec, now)
    _orphans(sup, now)
    for a in sup.agents.values():  # an adopted WAITING agent waits on what is not up
        if a.state is State.WAITING:
            a.waiting_on = {
                d for d in a.spec.depends_on if sup.agents[d].state is not State.RUNNING
            }
            if not a.waiting_on and a.child is not None:
                sup._set(a, State.RUNNING, "dependencies running")
                proc.signal_process(a.child.pid, signal.SIGUSR2)


def _watch(sup: Supervisor, a: _Agent, child: proc.Child, state: State, why: str) -> None:
    assert sup._watcher is not None
    a.child = child
    sup._watcher.watch(child, lambda ex: sup._on_exit(a, child, ex), sup._before_reap)
    if a.state is not state:  # adoption resumes a state: not a state-machine transition
        sup._record(a, a.state, state, why, adopted=True)
    a.auto_start = False
    a.reached_running = True
    hb = sup._heartbeat(a)
    if hb == "pipe":
        if (a.spec.id, "stdout", child.pid) in sup.output.held:
            a.last_beat = sup.clock()  # beats keep coming through the log daemon
        else:  # the log daemon that held its stdout is gone: its beats cannot be read
            a.beats_lost = True
            sup._log("warning", "adopted pipe agent: heartbeats not read", agent=a.spec.id)
    elif hb == "cluster":
        a.last_beat = sup.clock()
        a.next_check = sup.clock()
    sup._log("info", "adopted", agent=a.spec.id, pid=child.pid, state=state.value)


def _recover_agent(sup: Supervisor, a: _Agent, rec: dict[str, Any], now: float) -> None:
    a.tracker.restarts = int(rec.get("restarts") or 0)
    a.tracker.exhausted = EXHAUSTED_FLAG in (rec.get("flags") or [])
    a.operator_stopped = bool(rec.get("operator_stopped"))
    a.last_exit = rec.get("last_exit")
    a.started_at = rec.get("started_at")
    pid, start_time = rec.get("pid"), rec.get("start_time")
    state = rec.get("state")
    child = None
    if isinstance(pid, int) and isinstance(start_time, int | float):
        child = proc.adopt(pid, float(start_time))
    if child is not None:
        resumed = State(state) if state in _LIVE and state != "UNHEALTHY" else State.RUNNING
        _watch(sup, a, child, resumed, "adopted")
        return
    a.auto_start = False
    a.reached_running = True
    if state not in _LIVE or a.operator_stopped:
        return  # STOPPED stays STOPPED
    ex = Exit(at=now)
    a.last_exit = {
        "code": None,
        "signal": None,
        "at": now,
        "describe": ex.describe(),
        "note": "ended while no supervisor watched it",
        "stderr_tail": [],
    }
    sup._log("warning", "died while the supervisor was down", agent=a.spec.id, pid=pid)
    # the previous run left it live: resume from UNHEALTHY and apply the policy
    sup._record(a, a.state, State.UNHEALTHY, "ended while unsupervised")
    sup._exited(a, ex)


def _orphans(sup: Supervisor, now: float) -> None:
    known = {a.child.pid for a in sup.agents.values() if a.child is not None}
    found = []
    for p in proc.find_marked(sup.state_dir):
        try:
            found.append((p, p.environ().get(proc.AGENT_ENV), os.getsid(p.pid)))
        except (psutil.Error, OSError):
            continue
    found.sort(key=lambda t: t[0].pid != t[2])  # session leaders (agents) first
    for p, agent_id, sid in found:
        if p.pid in known or sid in known:
            continue  # an adopted agent or one of its descendants
        a = sup.agents.get(agent_id or "")
        if (
            sup.manifest.settings.orphans == "adopt"
            and a is not None
            and a.child is None
            and sid == p.pid
            and not a.operator_stopped
        ):
            child = proc.adopt(p.pid, p.create_time())
            if child is not None:
                a.restart_at = None
                _watch(sup, a, child, State.RUNNING, "orphan adopted")
                known.add(p.pid)
                continue
        if a is None and sup.manifest.settings.orphans == "adopt":
            sup._log("warning", "marked process of no agent left alone", pid=p.pid)
            continue
        sup._log("warning", "killing orphan", agent=agent_id, pid=p.pid)
        if sid == p.pid:
            proc.signal_group(p.pid, signal.SIGKILL)
        else:
            proc.signal_process(p.pid, signal.SIGKILL)
