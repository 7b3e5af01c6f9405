"""Re-attaching to the children of a supervisor that crashed (or was SIGKILLed).

:func:`recover` runs once when :meth:`Supervisor.run` starts, in three passes so
that no policy runs before every survivor is known:

1. **Adoption.** Each agent recorded in ``pids.json`` gets back what the last run
   knew of it: its restart bookkeeping (backoff step, restarts granted and when,
   exhaustion), a restart that was due at a given time, a start held for a
   dependency. One recorded with a pid whose start time still matches
   (:func:`~corral.supervisor.process.same_process`, checked after a pidfd was
   opened, so the check cannot race a pid reuse) is adopted: watched through the
   new pidfd, in its recorded state, never restarted; the state log says
   ``adopted`` from that state. A pid now used by an unrelated process is never
   adopted (nor signalled). Its output still flows through the log daemon, and a
   pipe-heartbeat agent whose stdout the log daemon still holds keeps being read
   (its heartbeat timeout counts from the adoption). Then processes carrying this
   state dir's marker that this did not account for are orphans (a ``pids.json``
   write lost in the crash, or descendants that escaped their group). With
   ``orphans = "adopt"`` an agent's own process (the leader of its session, as
   every spawned agent is) is adopted when that agent has no process; every other
   orphan is killed. ``orphans = "kill"`` kills them all.
2. **Policies.** An agent whose recorded process is gone died while no supervisor
   watched it: its exit status is unknown (the new supervisor is not its parent,
   and not its subreaper ancestor either: the kernel gave the status to whoever
   reaped it), and its restart policy is applied from its recorded state as for
   any failure, with the backoff it had reached. An agent recorded STOPPED stays
   STOPPED (an operator stop, a finished one-shot, an exhausted agent); one that
   was waiting for its restart keeps the time it was due.
3. **Dependents.** Every agent that is down and will start again (a restart due,
   a start held, or a process not yet RUNNING) pauses the adopted agents that
   depend on it, exactly as at run time (WAITING, SIGUSR1); an adopted agent
   recorded WAITING whose dependencies all run again is resumed (SIGUSR2).
"""

from __future__ import annotations

import os
import signal
from typing import TYPE_CHECKING, Any

import psutil

from corral.supervisor import process as proc
from corral.supervisor.policy import State

if TYPE_CHECKING:
    from corral.supervisor.agent import _Agent
    from corral.supervisor.supervisor import Supervisor

__all__ = ["recover"]

_LIVE = (State.STARTING, State.RUNNING, State.WAITING, State.UNHEALTHY)


def recover(sup: Supervisor) -> None:
    """Adopt live children and orphans, apply policies to the dead, then pause
    the dependents of what is not RUNNING."""
    records = sup.pidfile.load().get("agents", {})
    now = sup.clock()
    dead: list[tuple[_Agent, State]] = []
    for agent_id, a in sup.agents.items():
        rec = records.get(agent_id)
        if isinstance(rec, dict):
            gone = _restore(sup, a, rec)
            if gone is not None:
                dead.append((a, gone))
    _orphans(sup, now)
    for a, recorded in dead:
        if a.child is None:  # not adopted as an orphan after all
            sup.died_unwatched(a, recorded, now)
    for a in sup.agents.values():  # the waits of the last run, then of this one
        a.waiting_on &= {x.spec.id for x in sup.agents.values() if _down(x)}
    for a in sup.agents.values():
        if _down(a):
            sup.pause_dependents(a)
    for a in sup.agents.values():
        if a.state is State.WAITING and a.child is not None and not a.waiting_on:
            sup.resume(a, "dependencies running")


def _down(a: _Agent) -> bool:
    """Down and starting again: dependents wait for it."""
    if a.child is None:
        return a.pending_start
    return a.state in (State.STARTING, State.UNHEALTHY)


def _restore(sup: Supervisor, a: _Agent, rec: dict[str, Any]) -> State | None:
    """Restore ``a`` and adopt its process; the recorded state when that process
    is gone while it was live (its policy is due), else ``None``."""
    recorded = a.restore(rec)
    a.auto_start = False
    a.reached_running = True
    pid, start_time = rec.get("pid"), rec.get("start_time")
    child = None
    if isinstance(pid, int) and isinstance(start_time, int | float):
        child = proc.adopt(pid, float(start_time))
    if child is not None:
        state = recorded if recorded in _LIVE else State.RUNNING
        sup.adopt(a, child, recorded=recorded, state=state, reason="adopted")
        return None
    if recorded is None or recorded not in _LIVE or a.operator_stopped:
        a.restart_at, a.held = None, False
        return None  # STOPPED stays STOPPED
    if pid is None and (a.restart_at is not None or a.held):
        a.state = recorded  # waiting for its restart, or held: go on waiting
        if a.restart_at is not None:
            due = round(max(0.0, a.restart_at - sup.clock()), 3)
            sup.log("info", "restart still due", agent=a.spec.id, restart_in=due)
        return None
    a.restart_at, a.held = None, False
    return recorded


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
                recorded = a.state if a.state is not State.STOPPED else None
                sup.adopt(a, child, recorded=recorded, state=State.RUNNING, reason="orphan adopted")
                known.add(p.pid)
                continue
        if a is None and sup.manifest.settings.orphans == "adopt":
            sup.log("warning", "marked process of no agent left alone", pid=p.pid)
            continue
        sup.log("warning", "killing orphan", agent=agent_id, pid=p.pid)
        if sid == p.pid:
            proc.signal_group(p.pid, signal.SIGKILL)
        else:
            proc.signal_process(p.pid, signal.SIGKILL)
