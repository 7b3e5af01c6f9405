"""The supervisor daemon: starts a manifest's agents in dependency order, watches
them, restarts them by policy, stops them gracefully, and re-attaches to them after
its own crash.

Everything runs on one asyncio loop with no thread per child and no periodic tick:
a process exit is its pidfd becoming readable, a pipe heartbeat is an event from
the log daemon (which reads the agent's stdout), and the only timers are the
deadlines :func:`reconcile` returns (startup and heartbeat timeouts, the end of a
restart backoff, a stop timeout, the next cluster-heartbeat check) and the probes'
intervals (:mod:`corral.supervisor.probe`). The decisions themselves are the pure
functions of :mod:`corral.supervisor.policy`, asked through each agent's
:class:`~corral.supervisor.agent.Agent` (its exit's decision, its next deadline).

``depends_on`` holds for every start: a start that comes due while a dependency is
not RUNNING is held (WAITING, no process) and spawned when it is.

State survives in the state dir: ``pids.json`` (each agent's pid with its start
time, state, restart bookkeeping, a due restart, flags, last exit),
``logs/<agent>/stdout.log|stderr.log``, ``logs/supervisor/state.log`` (one JSON line
per transition or adoption) and ``logs/supervisor/supervisor.log`` (the
supervisor's own JSON log).

Adoption after a supervisor crash: :mod:`corral.supervisor.adopt`. The cluster
link (processes reported, operators' requests run, the cluster heartbeat; its 1 s
poll for requests is the only periodic wake-up): :mod:`corral.supervisor.link`.

Output: every child's stdout and stderr are pipes read by the log daemon, which
outlives the supervisor; pipe heartbeats come back as its events
(:mod:`corral.supervisor.output`). A clean shutdown stops the children, then logd.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from corral.errors import CorralError, NotFoundError
from corral.supervisor import link
from corral.supervisor import process as proc
from corral.supervisor.agent import PROBES, STDERR_TAIL, _Agent, stderr_tail
from corral.supervisor.logs import RotatingLog
from corral.supervisor.manifest import AgentSpec, Manifest, dependents, phases, stop_phases
from corral.supervisor.output import Output
from corral.supervisor.policy import (
    EXHAUSTED_FLAG,
    Exit,
    RestartTracker,
    State,
    check_transition,
    heartbeat_expired,
    next_deadline,
    parse_heartbeat,
    startup_expired,
)
from corral.supervisor.probe import Probes
from corral.supervisor.state import PidFile

__all__ = ["STDERR_TAIL", "Supervisor", "stderr_tail"]


class Supervisor:
    """Runs a :class:`Manifest`'s agents; see the module docstring.

    Its helpers (:mod:`~corral.supervisor.adopt`, :mod:`~corral.supervisor.link`,
    :mod:`~corral.supervisor.output`, :mod:`~corral.supervisor.probe`) use the public
    members only: :meth:`log`, :attr:`loop`, :attr:`shutting_down`, :meth:`spawn_task`,
    :meth:`kick`, :meth:`beat`, :meth:`on_line`, :meth:`adopt`, :meth:`died_unwatched`,
    :meth:`resume`, :meth:`probe_failed` and :meth:`pause_dependents`. A subclass that
    adds agents at run time (pools) uses :meth:`add_agent`, :meth:`launch` and
    :meth:`stop`, and gives the policy's inputs by overriding
    :meth:`retired_by_cluster`, :meth:`restart_not_before` and :meth:`on_recover`."""

    def __init__(
        self,
        manifest: Manifest,
        *,
        state_dir: str | os.PathLike[str],
        client: Any = None,
        clock: Callable[[], float] = time.time,
        rand: Callable[[], float] = random.random,
        subreaper: bool = True,
        url: str | None = None,
        token: str | None = None,
        host: str | None = None,
    ) -> None:
        self.manifest = manifest
        self.state_dir = Path(state_dir).resolve()
        self.client = client
        self.clock = clock
        self.rand = rand
        self.subreaper = subreaper
        self.url = url if url is not None else getattr(client, "url", None)
        self._operator_token = token if token is not None else getattr(client, "token", None)
        cfg = manifest.settings.restart_config()
        self.agents: dict[str, _Agent] = {
            s.id: _Agent(s, RestartTracker(config=cfg, rand=rand), cluster=client is not None)
            for s in manifest.agents
        }
        self._phases = [[a.id for a in p] for p in phases(manifest)]
        self._phase = 0  # the next phase to start
        self.logs_dir = self.state_dir / "logs"
        self.pidfile = PidFile(self.state_dir / "pids.json")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._watcher: proc.ExitWatcher | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._save_pending = False
        self._shutting_down = False
        self._done: asyncio.Event | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._state_log: RotatingLog | None = None
        self._log_file: RotatingLog | None = None
        # called with each state.log record as it is written (corral supervise's lines)
        self.listeners: list[Callable[[dict[str, Any]], None]] = []
        self.output = Output(self)
        self.probes = Probes(self)  # http/tcp/exec heartbeats
        self.link = link.ClusterLink(self, host)  # reports and requests (cluster)

    # ---- public API ---------------------------------------------------------------

    async def run(self) -> None:
        """Adopt what survives from a previous run, start the rest phase by phase,
        and serve until :meth:`shutdown` (SIGTERM/SIGINT cascade-stop)."""
        loop = asyncio.get_running_loop()
        self._open(loop)
        handled = [signal.SIGTERM, signal.SIGINT, signal.SIGHUP]
        loop.add_signal_handler(signal.SIGTERM, self._spawn_task, self.shutdown)
        loop.add_signal_handler(signal.SIGINT, self._spawn_task, self.shutdown)
        loop.add_signal_handler(signal.SIGHUP, self.reopen_logs)
        if self.subreaper and proc.set_subreaper():
            handled.append(signal.SIGCHLD)
            loop.add_signal_handler(signal.SIGCHLD, self._reap_strays)
        try:
            self._log("info", "supervisor started", pid=os.getpid(), agents=len(self.agents))
            self._recover()
            self._kick()
            self.link.start()
            assert self._done is not None
            await self._done.wait()
        finally:
            for sig in handled:
                loop.remove_signal_handler(sig)
            self._close()

    def reconcile(self, now: float) -> float | None:
        """Apply every decision due at ``now`` (stop timeouts, due restarts, held
        starts whose dependencies run, startup and heartbeat timeouts, the next
        phase) and return the next deadline."""
        for a in self.agents.values():
            if a.stop_deadline is not None and now >= a.stop_deadline:
                a.stop_deadline = None
                if a.child is not None:
                    self._log("warning", "stop timeout: SIGKILL", agent=a.spec.id, pid=a.child.pid)
                    proc.signal_group(a.child.pid, signal.SIGKILL)
            if a.restart_at is not None and now >= a.restart_at:
                a.restart_at = None
                if not self._shutting_down and a.child is None:
                    self._launch(a, "restart due")
            if not a.watched:
                continue
            hb = a.heartbeat
            if hb == "cluster" and a.next_check is not None and now >= a.next_check:
                link.check_cluster(self, a)
            elif hb == "none" or a.checking:
                continue
            if a.state is State.STARTING and a.started_at is not None:
                if startup_expired(a.started_at, a.spec.startup_timeout, now):
                    self._unhealthy(a, "startup timeout", now)
            elif (
                hb not in PROBES  # a probe's failures count instead (probe_failed)
                and a.state in (State.RUNNING, State.WAITING)
                and (silent := a.silence_from()) is not None
                and heartbeat_expired(silent, a.spec.heartbeat_timeout, now)
            ):
                self._unhealthy(a, "heartbeat timeout", now)
        self._release_held()
        self._advance_phases()
        return next_deadline(a.deadline() for a in self.agents.values())

    async def start(self, agent_id: str) -> dict[str, Any]:
        """Start a stopped agent now (clears ``restart-exhausted`` and the backoff);
        while a dependency is not RUNNING it waits for it (WAITING, no process)."""
        a = self._get(agent_id)
        a.operator_stopped = False
        a.tracker.operator_start()
        if a.child is None and not self._shutting_down:
            a.restart_at = None
            self._launch(a, "operator start")
            self._kick()
        return self._status(a)

    async def stop(self, agent_id: str) -> dict[str, Any]:
        """Stop an agent gracefully; it stays STOPPED whatever its policy."""
        a = self._get(agent_id)
        a.operator_stopped = True
        a.restart_at = None
        a.held = False
        if a.child is not None:
            await self._stop_child(a, "operator stop")
        elif a.state is not State.STOPPED:
            a.waiting_on.clear()
            self._set(a, State.STOPPED, "operator stop")
        self._dirty()
        return self._status(a)

    async def restart(self, agent_id: str) -> dict[str, Any]:
        """Stop and start an agent; its dependents wait (SIGUSR1) until it is
        RUNNING again (SIGUSR2). An agent that has run before counts one restart
        more (``restarts``, the count shown); the crash-loop budget counts only the
        policy's restarts, so an operator's restart never exhausts an agent."""
        a = self._get(agent_id)
        had_run = a.child is not None or a.pending_start or a.last_exit is not None
        a.restart_at = None
        if a.child is not None:
            self.pause_dependents(a)
            await self._stop_child(a, "operator restart")
        if had_run and not self._shutting_down:
            a.tracker.operator_restart()  # before the start: its report carries it
        return await self.start(agent_id)

    async def shutdown(self) -> None:
        """Cascade stop: the start phases last first; within a phase the agents
        nothing depends on together, then each agent others depend on alone, in
        reverse manifest order, each waited for (at most its ``stop_timeout`` and
        the SIGKILL after it) before the next; then the log daemon; then ``run``
        returns."""
        if self._shutting_down:
            return
        self._shutting_down = True
        self._log("info", "shutdown: cascade stop")
        for a in self.agents.values():
            a.restart_at = None
            a.held = False
        for layer in stop_phases(self.manifest):
            batch = [self.agents[s.id] for s in layer]
            needed = {s.id for s in layer if dependents(self.manifest, s.id, transitive=False)}
            leaves = [a for a in batch if a.spec.id not in needed and a.child]
            await asyncio.gather(*(self._stop_child(a, "shutdown") for a in leaves))
            for a in batch:  # reverse manifest order: one at a time
                if a.spec.id in needed and a.child is not None:
                    await self._stop_child(a, "shutdown")
            for a in batch:
                if a.state is not State.STOPPED and a.child is None:
                    a.waiting_on.clear()
                    self._set(a, State.STOPPED, "shutdown")
        self._save(clean=True)
        self.link.stop()  # the final report still goes (pending below)
        pending = [t for t in self._tasks if t is not asyncio.current_task()]
        if pending:  # events still being published to the cluster
            await asyncio.wait(pending, timeout=5)
        self.output.shutdown()  # the children are gone: logd finishes every log
        if self._done is not None:
            self._done.set()

    def status(self) -> list[dict[str, Any]]:
        """One dict per agent in manifest order: agent, state, pid, restarts,
        uptime, last_beat, flags, last_exit (and heartbeat, beat_status, waiting_on,
        restart_at)."""
        return [self._status(a) for a in self.agents.values()]

    def reopen_logs(self) -> None:
        """Reopen the supervisor's own log files and ask the log daemon to reopen
        the agents' (after an outside tool moved them)."""
        for log in (self._state_log, self._log_file):
            if log is not None:
                log.reopen()
        self.output.reopen()

    # ---- the helpers' interface ---------------------------------------------------

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        """The running loop (``None`` before :meth:`run`)."""
        return self._loop

    @property
    def shutting_down(self) -> bool:
        return self._shutting_down

    def log(self, level: str, msg: str, **fields: Any) -> None:
        """One JSON line in ``logs/supervisor/supervisor.log``."""
        if self._log_file is not None:
            rec = {"ts": self.clock(), "level": level, "msg": msg, **fields}
            self._log_file.write_line(json.dumps(rec, default=str).encode())

    _log = log

    def spawn_task(self, fn: Callable[[], Any]) -> None:
        """Run the coroutine function ``fn`` on the loop (cancelled at close)."""
        task = asyncio.ensure_future(fn())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    _spawn_task = spawn_task

    def kick(self) -> None:
        """Run :meth:`reconcile` now and sleep until the deadline it returns."""
        if self._loop is None or (self._done is not None and self._done.is_set()):
            return
        nxt = self.reconcile(self.clock())
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if nxt is not None:
            self._timer = self._loop.call_later(max(0.0, nxt - self.clock()), self._kick)

    _kick = kick

    def on_line(self, agent: str, stream: str, pid: Any, line: str) -> None:
        """A ``HEARTBEAT`` line the log daemon read from a child's stdout."""
        a = self.agents.get(agent)
        if a is None or stream != "stdout" or a.child is None or a.child.pid != pid:
            return  # an old child's line, or one of another state dir's agent
        beat = parse_heartbeat(line)
        if beat is not None and a.heartbeat in ("pipe", "none"):
            self.beat(a, self.clock(), beat.status)
            self._kick()

    def beat(self, a: _Agent, now: float, status: str | None) -> None:
        """A sign of life of ``a``'s process (a line, a node's beat, a probe)."""
        a.last_beat = now
        a.beat_status = status
        if a.state is State.STARTING and not a.hung and a.stopping is None:
            self._set(a, State.RUNNING, "first heartbeat")
            self._resume_dependents(a)

    def probe_failed(self, a: _Agent, why: str) -> None:
        """``a``'s probe failed its ``failures``-th time in a row while it ran."""
        if a.watched and a.state in (State.RUNNING, State.WAITING):
            self._unhealthy(a, f"probe failed: {why}", self.clock())
            self._kick()

    def adopt(
        self, a: _Agent, child: proc.Child, *, recorded: State | None, state: State, reason: str
    ) -> None:
        """Watch a process a previous run left (``child``) as ``a``'s, resuming
        ``state``; logged as an adoption from the ``recorded`` state, not as a
        transition."""
        assert self._watcher is not None
        a.child, a.last_pid = child, child.pid
        a.restart_at, a.held = None, False
        self._watcher.watch(child, lambda ex: self._on_exit(a, child, ex), self._before_reap)
        a.state = state
        if state is State.RUNNING:
            a.tracker.mark_running(self.clock())
        a.auto_start = False
        a.reached_running = True
        self._write_state_line(a, recorded, state, reason, adopted=True)
        if state is State.UNHEALTHY:  # it was being stopped (hung): stop it again
            a.hung = "unhealthy when adopted"
            proc.signal_group(child.pid, a.spec.stop_signal)
            a.stop_deadline = self.clock() + a.spec.stop_timeout
        if a.heartbeat == "pipe":
            if (a.spec.id, "stdout", child.pid) in self.output.held:
                a.last_beat = self.clock()  # beats keep coming through the log daemon
            else:  # the log daemon that held its stdout is gone: its beats cannot be read
                a.beats_lost = True
                self._log("warning", "adopted pipe agent: heartbeats not read", agent=a.spec.id)
        elif a.heartbeat == "cluster":
            a.last_beat = self.clock()
            a.next_check = self.clock()
        elif a.heartbeat in PROBES:
            a.last_beat = self.clock()
            self.probes.start(a, child)
        self._log("info", "adopted", agent=a.spec.id, pid=child.pid, state=state.value)

    def died_unwatched(self, a: _Agent, recorded: State, now: float) -> None:
        """``a`` was live (``recorded``) when the last supervisor stopped watching
        and its process is gone: its exit (status unknown) goes through the policy
        from the recorded state."""
        a.state = recorded
        a.auto_start = False
        a.reached_running = True
        self._log("warning", "died while the supervisor was down", agent=a.spec.id, pid=a.last_pid)
        if recorded is State.UNHEALTHY:
            a.hung = "unhealthy when the supervisor stopped"
        self._exited(a, Exit(at=now), pid=None)
        if a.last_exit is not None:
            a.last_exit["note"] = "ended while no supervisor watched it"

    def resume(self, a: _Agent, reason: str) -> None:
        """A WAITING agent with a process goes on: RUNNING, and SIGUSR2."""
        if a.child is not None and a.state is State.WAITING:
            self._set(a, State.RUNNING, reason)
            proc.signal_process(a.child.pid, signal.SIGUSR2)

    def add_agent(self, spec: AgentSpec) -> _Agent:
        """An agent that joins at run time (a pool member): it is part of the
        manifest from now on (dependencies, the cascade stop, adoption) and is
        started by :meth:`launch`, not by the phases."""
        tracker = RestartTracker(config=self.manifest.settings.restart_config(), rand=self.rand)
        a = _Agent(spec, tracker, cluster=self.client is not None)
        a.auto_start = False
        self.agents[spec.id] = a
        self.manifest = replace(self.manifest, agents=(*self.manifest.agents, spec))
        return a

    def launch(self, a: _Agent, why: str) -> None:
        """Start ``a`` now: spawned when every agent it depends on is RUNNING, else
        held (WAITING on them, no process) until they are."""
        down = self._deps_down(a)
        if not down:
            a.held = False
            self._spawn(a)
            return
        a.held = True
        a.waiting_on = down
        self._set(a, State.WAITING, f"{why}: waiting on {', '.join(sorted(down))}")
        self._dirty()

    _launch = launch

    def on_recover(self, records: dict[str, Any]) -> None:
        """Called with ``pids.json``'s agent records before adoption (a subclass
        makes the agents it adds at run time known again)."""

    def pause_dependents(self, a: _Agent) -> None:
        """``a`` is down and will start again: whatever depends on it (directly or
        through others) and runs goes WAITING (SIGUSR1) until it is RUNNING."""
        for spec in dependents(self.manifest, a.spec.id):
            d = self.agents[spec.id]
            if d.child is None:
                if d.held:
                    d.waiting_on.add(a.spec.id)
                continue
            if d.stopping is not None or d.hung:
                continue
            if d.state in (State.RUNNING, State.STARTING):
                d.waiting_on.add(a.spec.id)
                self._set(d, State.WAITING, f"{a.spec.id} restarting")
                proc.signal_process(d.child.pid, signal.SIGUSR1)
            elif d.state is State.WAITING:
                d.waiting_on.add(a.spec.id)

    _pause_dependents = pause_dependents

    # ---- setup and teardown -------------------------------------------------------

    def _open(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._done = asyncio.Event()
        self._watcher = proc.ExitWatcher(loop, self.clock)
        self.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        own = self.logs_dir / "supervisor"
        s = self.manifest.settings
        self._state_log = RotatingLog(own / "state.log", s.log_max_bytes, s.log_keep)
        self._log_file = RotatingLog(own / "supervisor.log", s.log_max_bytes, s.log_keep)
        self.output.connect(sync=True)  # before becoming a subreaper (see logd)

    def _close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        for t in list(self._tasks):
            t.cancel()
        self.probes.close()
        if self._watcher is not None:
            self._watcher.close()  # adopted-on-next-start children keep running
        self.output.close()  # logd keeps the children's output flowing
        if self._save_pending or not self._shutting_down:
            self._save(clean=self._shutting_down)
        for log in (self._state_log, self._log_file):
            if log is not None:
                log.close()

    # ---- state transitions and persistence ----------------------------------------

    def _set(self, a: _Agent, new: State, reason: str, **extra: Any) -> None:
        """A state transition: checked, applied, written to state.log, published."""
        old = a.state
        if old is new:
            return
        check_transition(old, new)
        now = self.clock()
        a.state = new
        if new is State.RUNNING:
            a.tracker.mark_running(now)
            a.reached_running = True
        elif new in (State.UNHEALTHY, State.STOPPED):
            a.tracker.mark_down(now)
        self._write_state_line(a, old, new, reason, **extra)

    def _write_state_line(
        self, a: _Agent, old: State | None, new: State, reason: str, **extra: Any
    ) -> None:
        pid = a.child.pid if a.child else a.last_pid
        rec = {"ts": self.clock(), "agent": a.spec.id, "from": old and old.value}
        rec.update(to=new.value, reason=reason, pid=pid, **extra)
        if self._state_log is not None:
            self._state_log.write_line(json.dumps(rec, default=str).encode())
        for listener in self.listeners:
            listener(rec)
        self.link.changed()  # the cluster gets the new state (process_state events)
        self._dirty()

    def _dirty(self) -> None:
        if self._loop is None or self._save_pending:
            return
        self._save_pending = True
        self._loop.call_soon(self._save)

    def _save(self, clean: bool = False) -> None:
        self._save_pending = False
        agents = {}
        for a in self.agents.values():
            if clean and a.child is None:
                continue
            agents[a.spec.id] = a.record()
        self.pidfile.save({"supervisor_pid": os.getpid(), "agents": agents})

    # ---- spawning -----------------------------------------------------------------

    def _env(self, a: _Agent) -> dict[str, str]:
        token = None
        op = self._operator_token
        if self.url and str(self.url).startswith("http") and op and not op.startswith("node"):
            from corral.server.auth import Tokens

            token = Tokens(op).node_token(a.spec.id)
        env, overridden = proc.child_env(
            a.spec, state_dir=self.state_dir, url=self.url, token=token
        )
        if overridden:
            self._log("warning", "manifest env overridden", agent=a.spec.id, keys=overridden)
        return env

    def _deps_down(self, a: _Agent) -> set[str]:
        """The agents ``a`` depends on that are not RUNNING."""
        return {d for d in a.spec.depends_on if self.agents[d].state is not State.RUNNING}

    def _release_held(self) -> None:
        """Spawn the held agents whose dependencies are all RUNNING now."""
        progress = not self._shutting_down
        while progress:
            progress = False
            for a in self.agents.values():
                if not a.held or a.child is not None:
                    continue
                down = self._deps_down(a)
                if down != a.waiting_on:
                    a.waiting_on = down
                    self._dirty()
                if not down:
                    a.held = False
                    self._spawn(a)
                    progress = True

    def _spawn(self, a: _Agent) -> None:
        assert self._watcher is not None
        now = self.clock()
        a.hung, a.beats_lost, a.held = None, False, False
        a.last_beat = a.beat_status = a.cluster_unreachable_at = None
        a.probe_failures = 0
        a.waiting_on.clear()
        a.started_at = now
        a.mark_run_start(self.logs_dir / a.spec.id / "stderr.log")
        reads: dict[str, int] = {}  # the pipes' read ends, for the log daemon
        writes: list[int] = []
        try:
            for stream in ("stdout", "stderr"):
                reads[stream], w = os.pipe2(os.O_CLOEXEC)
                writes.append(w)
            cwd = a.spec.cwd
            if cwd is not None and not os.path.isabs(cwd):
                cwd = str(Path(self.manifest.path).resolve().parent / cwd)
            out, err = writes
            child = proc.spawn(a.spec, env=self._env(a), cwd=cwd, stdout_fd=out, stderr_fd=err)
        except (OSError, ValueError, CorralError) as e:
            for fd in reads.values():
                os.close(fd)
            self._set(a, State.STARTING, "spawn")
            self._log("error", "spawn failed", agent=a.spec.id, error=str(e))
            self._exited(a, Exit(code=127, at=now), error=str(e))
            return
        finally:
            for fd in writes:
                os.close(fd)
        self.output.attach(a, child.pid, reads)  # closes our copies of the read ends
        a.child, a.last_pid = child, child.pid
        a.started_at = now = self.clock()  # timeouts count from the process's existence
        self._watcher.watch(child, lambda ex: self._on_exit(a, child, ex), self._before_reap)
        self._set(a, State.STARTING, "spawn")
        if a.heartbeat == "none":
            self._set(a, State.RUNNING, "spawned (heartbeat none)")
            self._resume_dependents(a)
        elif a.heartbeat == "cluster":
            a.next_check = now + min(a.spec.heartbeat_interval, a.spec.startup_timeout)
        elif a.heartbeat in PROBES:
            self.probes.start(a, child)

    # ---- exits --------------------------------------------------------------------

    def _before_reap(self, child: proc.Child) -> None:
        # the leader has exited but is not reaped: its pgid cannot be reused yet
        if not child.adopted:
            proc.signal_group(child.pid, signal.SIGKILL)

    def _on_exit(self, a: _Agent, child: proc.Child, ex: Exit) -> None:
        if a.child is not child:
            return
        a.child = None
        a.last_pid = child.pid
        if child.adopted:  # no group id guarantee after the exit: sweep by marker
            self._sweep(a)
        self._exited(a, ex, pid=child.pid)
        self._kick()

    # ---- policy inputs a subclass may give (pools: from their nodes snapshot) ------

    def retired_by_cluster(self, a: _Agent) -> bool:
        """Whether ``a``'s work is over by an outside decision, so its exit is not
        restarted whatever its policy (no blocking call: read a snapshot)."""
        return False

    def restart_not_before(self, a: _Agent) -> float | None:
        """The earliest time a restart of ``a`` may be due (``None``: no bound)."""
        return None

    def _exited(
        self, a: _Agent, ex: Exit, error: str | None = None, pid: int | None = None
    ) -> None:
        now = ex.at if ex.at is not None else self.clock()
        rec: dict[str, Any] = {
            "code": ex.code,
            "signal": ex.signal,
            "at": now,
            "describe": ex.describe(),
            "stderr_tail": [],  # filled once the log daemon has drained the pipe
        }
        a.last_exit = rec
        if error:
            rec["error"] = error
        a.stop_deadline = None
        hung = a.hung if a.stopping is None else None
        why = f"{hung}, then {ex.describe()}" if hung else (error or ex.describe())
        crash = a.stopping is None and (not ex.clean or bool(hung))

        def tail_known(tail: list[str]) -> None:
            rec["stderr_tail"] = tail
            if crash:
                self._log("error", "crash", agent=a.spec.id, exit=why, stderr_tail=tail)
            self._dirty()

        self.output.after_drain(a, pid, tail_known)
        if a.stopping is not None:
            fut, a.stopping = a.stopping, None
            a.hung = None
            self._sweep(a)
            self._set(a, State.STOPPED, a.stop_reason, exit=ex.describe())
            if not fut.done():
                fut.set_result(None)
            return
        decision = a.on_exit(
            ex,
            now,
            shutting_down=self._shutting_down,
            retired=self.retired_by_cluster(a),
            not_before=self.restart_not_before(a),
        )
        a.hung = None
        if decision.restart:
            delay = round(decision.delay, 3)
            if a.state is State.UNHEALTHY:  # already (a timeout): the decision is news
                self._log("info", "restart scheduled", agent=a.spec.id, exit=why, restart_in=delay)
            self._set(a, State.UNHEALTHY, why, restart_in=delay, restart_at=decision.restart_at)
            a.restart_at = decision.restart_at
            self.pause_dependents(a)
            self._dirty()
        elif decision.exhausted:
            self._set(a, State.UNHEALTHY, why)
            self._set(a, State.STOPPED, EXHAUSTED_FLAG)
            self._log("critical", "restart-exhausted", agent=a.spec.id)
        elif ex.clean and not hung:
            self._set(a, State.STOPPED, "exited 0", exit=ex.describe())
        elif decision.reason == "retired":
            self._set(a, State.STOPPED, "retired by the cluster", exit=ex.describe())
        else:
            self._set(a, State.UNHEALTHY, why)
            self._set(a, State.STOPPED, f"restart={a.spec.restart}")

    def _unhealthy(self, a: _Agent, reason: str, now: float) -> None:
        """A startup or heartbeat timeout (or failed probes): UNHEALTHY, and the
        process is stopped (stop signal, SIGKILL at stop_timeout); its exit applies
        the policy."""
        assert a.child is not None
        self._set(a, State.UNHEALTHY, reason)
        a.hung = reason
        proc.signal_group(a.child.pid, a.spec.stop_signal)
        a.stop_deadline = now + a.spec.stop_timeout

    async def _stop_child(self, a: _Agent, reason: str) -> None:
        """Stop signal to the group, SIGKILL at stop_timeout (a deadline, nothing
        blocks meanwhile), sweep marked descendants; the agent ends STOPPED."""
        if a.child is None:
            return
        if a.stopping is None:
            assert self._loop is not None
            a.stopping = self._loop.create_future()
            a.stop_reason = reason
            proc.signal_group(a.child.pid, a.spec.stop_signal)
            deadline = self.clock() + a.spec.stop_timeout
            if a.stop_deadline is None or deadline < a.stop_deadline:
                a.stop_deadline = deadline
            self._kick()
        await asyncio.shield(a.stopping)

    def _sweep(self, a: _Agent) -> None:
        """Kill descendants that escaped the agent's group, found by the marker."""
        live = {x.child.pid for x in self.agents.values() if x.child is not None}
        for p in proc.find_marked(self.state_dir, a.spec.id):
            if p.pid in live:
                continue
            try:
                if os.getsid(p.pid) in live:
                    continue
            except OSError:
                continue
            self._log("warning", "killing escaped descendant", agent=a.spec.id, pid=p.pid)
            proc.signal_process(p.pid, signal.SIGKILL)

    def _reap_strays(self) -> None:
        if self._watcher is not None:
            proc.reap_strays(self._watcher.pids | self.probes.pids)

    # ---- dependencies -------------------------------------------------------------

    def _resume_dependents(self, a: _Agent) -> None:
        for d in self.agents.values():
            if a.spec.id not in d.waiting_on:
                continue
            d.waiting_on.discard(a.spec.id)
            if not d.waiting_on:
                self.resume(d, f"{a.spec.id} running again")

    def _advance_phases(self) -> None:
        while self._phase < len(self._phases) and not self._shutting_down:
            if self._phase > 0:
                prev = [self.agents[i] for i in self._phases[self._phase - 1]]
                if not all(p.reached_running or p.operator_stopped for p in prev):
                    return
            for agent_id in self._phases[self._phase]:
                a = self.agents[agent_id]
                if a.auto_start and a.child is None and a.state is State.STOPPED:
                    self._launch(a, "start")
            self._phase += 1

    # ---- status -------------------------------------------------------------------

    def _status(self, a: _Agent) -> dict[str, Any]:
        return a.status(self.clock())

    def _get(self, agent_id: str) -> _Agent:
        try:
            return self.agents[agent_id]
        except KeyError:
            raise NotFoundError(f"no agent {agent_id!r} in the manifest", field="id") from None

    # ---- adoption -----------------------------------------------------------------

    def _recover(self) -> None:
        """Re-attach to the children a previous run left (``pids.json``), apply the
        policies to those that died meanwhile, then pause what depends on what is
        not RUNNING (:func:`corral.supervisor.adopt.recover`)."""
        from corral.supervisor.adopt import recover

        self.on_recover(self.pidfile.load().get("agents", {}))
        recover(self)
