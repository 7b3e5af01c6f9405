"""Issue 31's campaign: several hosts under fire.

``--hosts`` hosts (Linux network namespaces on a bridge, ``bench/hosts``), each with
``corral serve`` and ``corral supervise`` running ``--workers`` SDK workers, on the
harness's own PostgreSQL. A steady load (tasks added through every host's server and
claimed, run and completed by the workers, which heartbeat; activations taken and
released by a runner per host) runs for ``--minutes``
while a fixed ``--seed`` chooses faults at random intervals:

- partition: a host's veth set down (it reaches neither PostgreSQL nor the other
  hosts), healed 2-20 s later;
- latency: every chunk a host's proxies relay waits 50-300 ms, for 2-10 s;
- loss: each chunk a host's database proxy relays ends its connection with
  probability 2-20 %, for 2-10 s;
- stall: a host's database proxy forwards nothing for 1-5 s (connections stay open);
- kill_serve / kill_leader: SIGKILL of a host's ``corral serve`` (not the monitor's
  leader's / the leader's);
- kill_supervisor: SIGKILL of a host's ``corral supervise`` (it adopts its agents when
  started again over the same state dir);
- kill_worker: SIGKILL of one SDK worker (its supervisor restarts it);
- sigstop: SIGSTOP of a serve, supervisor, worker or the leader's serve, SIGCONT
  1-6 s later;
- terminate: ``pg_terminate_backend`` of every session of the database;
- pg_restart: PostgreSQL restarted (fast mode);
- clock_step: one host's wall clock stepped by +30 s or -30 s for 5-20 s, then back.

Each host's ``corral serve`` and ``corral supervise`` run as under systemd with
``Restart=always``, ``RestartSec=1``: the harness's watchdog starts one that exited
again a second later (a killed one, or a ``corral serve`` that exits at start because
PostgreSQL cannot be reached).

A host's clock is stepped by ``bench/hosts/clockstep.c``, an LD_PRELOAD shim in all of
that host's processes that adds the offset in a file to CLOCK_REALTIME only (what a
step does; the kernel's time namespaces offset the monotonic clocks, never the wall
clock). Invariants, checked continuously (each second) and from the event log at the
end:

- every acknowledged task is done exactly once, or still pending / in progress under a
  live node's lease; no task has two completions;
- no completion accepted from a stale epoch (the event log's claim / recovery /
  completion sequence of each task);
- live nodes <= ``max_agents`` at every sample (corral has no per-model cap);
- no supervised agent running twice (its processes, by ``CORRAL_AGENT_ID``);
- no activation held twice: a runner per host (a node through its host's server)
  takes, holds and releases activations of the scheduler's agents; in the event log
  no agent is assigned while an earlier assignment of it is neither released nor
  expired;
- every silent holder's lease recovered within its threshold + 1 s, plus, when a
  fault kept every monitor from acting (PostgreSQL down or its sessions ended, the
  leader killed, stopped, cut off or its connections stalled), the documented bound of
  that fault (docs/deploy.md, "Several hosts");
- the monitor's leadership on a live host within its bound after its leader was
  cut off (partitioned, stopped or killed);
- no unbounded growth: each long-lived process's RSS, and the event table's rows per
  task.

It prints the table of faults injected and invariants checked, writes JSON, and exits 1
on any violation, printing the seed to replay it.

    python bench/chaos.py --hosts 3 --minutes 30 --out bench/results/chaos.json
    python bench/chaos.py --hosts 3 --minutes 3 --seed 7        # the slow test's form

Run as root (network namespaces). Results: bench/results/chaos.json.
"""

from __future__ import annotations

import argparse
import contextlib
import heapq
import json
import logging
import os
import random
import signal
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # _common, hosts
sys.path.insert(0, str(HERE.parent))  # tests.support.outage_procs

import psutil  # noqa: E402
import psycopg  # noqa: E402
from tests.support.outage_procs import terminate_sessions  # noqa: E402

import corral  # noqa: E402
from _common import RESULTS_DIR, machine_info, table, write_json  # noqa: E402
from corral.errors import NotFoundError  # noqa: E402
from hosts import net  # noqa: E402
from hosts.cluster import TOKEN, Host, Hosts  # noqa: E402

KINDS = (
    "partition",
    "latency",
    "loss",
    "stall",
    "kill_serve",
    "kill_leader",
    "kill_supervisor",
    "kill_worker",
    "sigstop",
    "terminate",
    "pg_restart",
    "clock_step",
)
MISSED_BEATS = 3  # the cluster's default: a node is dead after 3 beats without one
CLOCK_STEP = 30.0
# How long after a fault no monitor may be able to act (docs/deploy.md, "Several
# hosts"): the server's dead-peer detection of a cut-off leader's session (keepalives
# 10 s + 3 x 2 s, and the next tick), the monitor's retry backoff after an outage (at
# most 5 s), a restarted leader's handover (the next tick, 0.5 s).
LEADER_CUT_BOUND = 16.5
OUTAGE_BACKOFF = 5.0
# A stopped leader's session ended by the server once idle that long (its
# idle_session_timeout, 2 s), then the next tick of another monitor (0.5 s).
LEADER_STOP_BOUND = 3.0
RUNNER_BEAT = 2.0  # the activation runners' heartbeat interval
AGENTS = 6  # scheduler agents the runners activate
SERVE_START = 5.0  # a restarted corral serve answering again, on a loaded 2-core machine
RESTART_SEC = 1.0  # the watchdog's, as systemd's RestartSec
TERMINATE_BOUND = 1.0  # pg_terminate_backend of every session: all back within it


@dataclass
class Fault:
    t: float  # seconds since the start
    kind: str
    host: int | None = None
    target: str | None = None
    seconds: float = 0.0
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass
class Window:
    """A span (monotonic) of a fault: ``monitor``, it may have kept every monitor from
    acting (a late recovery within it is excused); ``silent``, the nodes of ``host``
    (None: of every host) may have been silent (a recovery within it is one of a
    silent holder)."""

    start: float
    end: float
    kind: str
    host: int | None = None
    monitor: bool = True
    silent: bool = True
    down: bool = False  # the host's own monitor cannot lead (to check a move against)


class Campaign:
    def __init__(self, hosts: Hosts, seed: int, seconds: float, rate: float, gap: float) -> None:
        self.hosts = hosts
        self.rng = random.Random(seed)
        self.seed = seed
        self.seconds = seconds
        self.rate = rate  # tasks per second, over every host
        self.gap = gap  # mean seconds between faults
        self.t0 = time.monotonic()
        self.stop = threading.Event()
        self.faults: list[Fault] = []
        self.windows: list[Window] = []
        self.violations: list[dict[str, Any]] = []
        self.acked: dict[int, float] = {}  # task id -> when its add was acknowledged
        self.add_failures = 0
        self.activations = 0  # released by their runner
        self.activation_failures = 0
        self.lock = threading.Lock()
        self.ends: list[tuple[float, int, Callable[[], None]]] = []  # (at, n, action)
        self._n = 0
        self.stopped: set[int] = set()  # pids SIGSTOPped now
        self.restarting: set[tuple[int, str]] = set()  # (host, serve|supervise) due
        self.restarts: Counter[str] = Counter()
        self.partitioned: int | None = None
        self.stepped: set[int] = set()
        self.samples: list[dict[str, Any]] = []
        self.rss: dict[int, list[tuple[float, int, str]]] = defaultdict(list)
        self.leaders: list[tuple[float, int | None]] = []
        self.last_look = 0.0  # when the observer last read the leader
        self.leader_moves: list[dict[str, Any]] = []
        self.max_live = 0
        self.duplicates = 0
        self.seq_times: list[tuple[int, float]] = []  # (max event seq, monotonic)

    # -- time and records -------------------------------------------------------

    def now(self) -> float:
        return time.monotonic() - self.t0

    def violation(self, invariant: str, **detail: Any) -> None:
        with self.lock:
            self.violations.append({"invariant": invariant, "t": round(self.now(), 2), **detail})

    def record(self, kind: str, host: Host | None = None, **detail: Any) -> Fault:
        f = Fault(self.now(), kind, None if host is None else host.i, **detail)
        self.faults.append(f)
        return f

    def later(self, seconds: float, action: Callable[[], None]) -> None:
        self._n += 1
        heapq.heappush(self.ends, (time.monotonic() + seconds, self._n, action))

    def window(
        self,
        seconds: float,
        kind: str,
        host: Host | None = None,
        *,
        monitor: bool = True,
        silent: bool = True,
        start: float | None = None,
    ) -> None:
        start = time.monotonic() if start is None else start
        hi = None if host is None else host.i
        self.windows.append(Window(start, time.monotonic() + seconds, kind, hi, monitor, silent))

    def down(self, host: Host, seconds: float) -> None:
        """For ``seconds`` from now, ``host``'s monitor cannot take the lead."""
        now = time.monotonic()
        self.windows.append(Window(now, now + seconds, "down", host.i, False, False, True))

    # -- the load ----------------------------------------------------------------

    def load(self, host: Host) -> None:
        """Add tasks through ``host``'s server at its share of the rate (each a
        little work: its description is the seconds its worker sleeps)."""
        client = corral.connect(host.url, token=TOKEN)
        period = len(self.hosts.hosts) / self.rate
        rng = random.Random(self.seed * 1000 + host.i)
        n = 0
        try:
            while not self.stop.is_set() and self.now() < self.seconds:  # then the drain
                n += 1
                spec = {
                    "title": f"h{host.i} load {n}",
                    "role": "developer",
                    "description": f"{rng.uniform(0.2, 3.0):.2f}",
                }
                try:
                    task = client.add_task(**spec)
                except Exception:
                    self.add_failures += 1  # not acknowledged: nothing promised
                else:
                    with self.lock:
                        self.acked[task.id] = self.now()
                self.stop.wait(period)
        finally:
            client.close()

    def runner(self, host: Host) -> None:
        """An activation runner on ``host`` (a node of its own, through its server):
        take the next agent's activation, hold it a moment, release it; beat between.
        A runner the cluster terminated (silent through a fault) registers again."""
        client = corral.connect(host.url, token=TOKEN)
        me = f"h{host.i}-runner"
        registered = False
        try:
            while not self.stop.is_set():
                try:
                    if not registered:
                        client.register_node(me, "developer", heartbeat_interval=RUNNER_BEAT)
                        registered = True
                    client.heartbeat(me)
                    a = client.get_assignment(me)
                    if a is not None:
                        self.stop.wait(0.3)
                        client.release_assignment(a.id, me, a.epoch)
                        self.activations += 1
                except NotFoundError:
                    registered = False  # terminated: register again
                except Exception:
                    self.activation_failures += 1  # an outage, or a lease lost meanwhile
                self.stop.wait(0.2)
        finally:
            client.close()

    # -- the faults -----------------------------------------------------------------

    def leader(self) -> Host | None:
        """The leader's host now; every read (the observer's, an injection's) also
        settles the cut-off leaders' moves it shows."""
        try:
            lead = self.hosts.leader()
        except psycopg.Error:
            return None
        self.note_leader(lead)
        return lead

    def note_leader(self, lead: Host | None) -> None:
        t = self.now()
        li = None if lead is None else lead.i
        live = lead is not None and not self.cut_off(lead)
        for move in self.leader_moves:
            if move["moved_after_s"] is not None or not live:
                continue
            if li != move["from"] or self.cut_ended(move):
                # between the last read that did not see it and this one
                move["moved_after_s"] = round(t - move["t"], 2)
                move["moved_after_low_s"] = round(max(0.0, self.last_look - move["t"]), 2)
                move["to"] = li
        self.last_look = t

    def pick(self) -> Host:
        return self.rng.choice(self.hosts.hosts)

    def inject(self, kind: str) -> None:
        hosts = self.hosts
        h = self.pick()
        if kind == "partition":
            if self.partitioned is not None:
                return self.inject(self.rng.choice(("latency", "loss", "stall")))
            secs = self.rng.uniform(2, 20)
            was_leader = self.leader() is h
            net.partition(h.i)
            self.partitioned = h.i
            h.partitioned = True
            self.record(kind, h, seconds=round(secs, 2), detail={"leader": was_leader})
            if was_leader:
                self.leader_cut(h, "partition")
            # its nodes go silent, and the leader (if it is here) holds its lock
            # until the server notices the dead peer
            self.window(secs + LEADER_CUT_BOUND, kind, h, monitor=was_leader)
            self.down(h, secs + OUTAGE_BACKOFF)  # and its monitor's backoff after the heal

            def heal() -> None:
                net.heal(h.i)
                h.partitioned = False
                self.partitioned = None

            self.later(secs, heal)
        elif kind in ("latency", "loss", "stall"):
            secs = self.rng.uniform(2, 10) if kind != "stall" else self.rng.uniform(1, 5)
            if kind == "latency":
                delay = self.rng.uniform(0.05, 0.3)
                h.db_proxy.delay(delay, secs)
                h.http_proxy.delay(delay, secs)
                detail = {"delay_s": round(delay, 3)}
            elif kind == "loss":
                p = self.rng.uniform(0.02, 0.2)
                h.db_proxy.drop(p, secs)
                # its sessions keep breaking: its monitor backs off (up to 5 s) meanwhile
                self.down(h, secs + OUTAGE_BACKOFF)
                detail = {"p": round(p, 3)}
            else:
                h.db_proxy.freeze(secs)
                self.down(h, secs)
                detail = {}
            self.record(kind, h, seconds=round(secs, 2), detail=detail)
            # its nodes' beats slow or stop; so do its monitor's round trips, if it leads
            self.window(secs + OUTAGE_BACKOFF, kind, h, monitor=self.leader() is h)
        elif kind in ("kill_serve", "kill_leader"):
            lead = self.leader()
            if kind == "kill_leader":
                if lead is None:
                    return self.inject("kill_serve")
                h = lead
            elif h is lead:
                others = [x for x in hosts.hosts if x is not lead]
                h = self.rng.choice(others)
            if not h.alive(h.serve):
                return
            assert h.serve is not None
            os.kill(h.serve.pid, signal.SIGKILL)
            h.serve.wait(10)
            self.record(kind, h, target="serve")
            if kind == "kill_leader":
                self.leader_cut(h, "kill")
            # its nodes' beats fail until it is back (the watchdog's restart, then a
            # start of a few seconds)
            self.window(RESTART_SEC + SERVE_START, kind, h, monitor=kind == "kill_leader")
            self.down(h, RESTART_SEC + SERVE_START)
        elif kind == "kill_supervisor":
            if not h.alive(h.supervise):
                return
            assert h.supervise is not None
            os.kill(h.supervise.pid, signal.SIGKILL)
            h.supervise.wait(10)
            self.record(kind, h, target="supervise")
        elif kind == "kill_worker":
            agent = self.rng.choice(h.agents)
            pids = h.agent_pids()[agent]
            if not pids:
                return
            with contextlib.suppress(ProcessLookupError):
                os.kill(pids[0], signal.SIGKILL)
            self.record(kind, h, target=agent)
            self.window(0.0, kind, h, monitor=False)
        elif kind == "sigstop":
            which = self.rng.choice(("serve", "supervise", "worker", "leader"))
            secs = self.rng.uniform(1, 6)
            pid = None
            if which == "leader":
                lead = self.leader()
                if lead is not None and lead.alive(lead.serve):
                    h, pid = lead, lead.serve.pid  # type: ignore[union-attr]
            elif which == "worker":
                pids = h.agent_pids()[self.rng.choice(h.agents)]
                pid = pids[0] if pids else None
            else:
                proc = h.serve if which == "serve" else h.supervise
                pid = proc.pid if h.alive(proc) else None  # type: ignore[union-attr]
            if pid is None or pid in self.stopped:
                return
            leads = self.leader() is h and h.serve is not None and pid == h.serve.pid
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)
            self.stopped.add(pid)
            self.record(kind, h, target=which, seconds=round(secs, 2), detail={"leader": leads})
            if leads:
                self.leader_cut(h, "sigstop")
            # a stopped server's or worker's nodes are silent; a stopped supervisor's
            # are not
            self.window(secs + OUTAGE_BACKOFF, kind, h, monitor=leads, silent=which != "supervise")
            if which in ("serve", "leader"):
                self.down(h, secs)

            def resume() -> None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)
                self.stopped.discard(pid)

            self.later(secs, resume)
        elif kind == "terminate":
            began = time.monotonic()
            n = terminate_sessions(hosts.pg.url(), hosts.pg.url("postgres"))
            self.record(kind, detail={"sessions": n})
            # every session reconnects at once; a monitor's first retry is 0.1 s on
            self.window(TERMINATE_BOUND, kind, start=began)
        elif kind == "pg_restart":
            began = time.monotonic()
            down = hosts.pg.restart()
            self.record(kind, seconds=round(down, 2))
            # the monitors' backoff doubles from 0.1 s while it is down: their next
            # try comes at most as long again after it is back
            self.window(down + 1.0, kind, start=began)
        elif kind == "clock_step":
            if h.i in self.stepped:
                return
            step = self.rng.choice((CLOCK_STEP, -CLOCK_STEP))
            secs = self.rng.uniform(5, 20)
            h.set_clock(step)
            self.stepped.add(h.i)
            self.record(kind, h, seconds=round(secs, 2), detail={"step_s": step})
            # no window: a step silences nothing and must not move a recovery

            def back() -> None:
                h.set_clock(0)
                self.stepped.discard(h.i)

            self.later(secs, back)
        return None

    def leader_cut(self, host: Host, how: str) -> None:
        """The leader was cut off: note when, to measure when a live host leads."""
        pid = host.serve.pid if host.serve is not None else None
        self.leader_moves.append(
            {
                "t": round(self.now(), 2),
                "from": host.i,
                "how": how,
                "pid": pid,
                "moved_after_s": None,
            }
        )

    def cut_off(self, host: Host) -> bool:
        """``host`` is partitioned, or its server is stopped."""
        return host.partitioned or (host.serve is not None and host.serve.pid in self.stopped)

    def cut_ended(self, move: dict[str, Any]) -> bool:
        """The leader's cut-off is over (healed, continued, or it was killed: its
        restarted server leading again counts as a move)."""
        h = self.hosts.hosts[move["from"]]
        if move["how"] == "partition":
            return not h.partitioned
        if move["how"] == "sigstop":
            return move["pid"] not in self.stopped
        return True

    def watchdog(self) -> None:
        """What systemd's ``Restart=always``, ``RestartSec=1`` does for each host's
        ``corral serve`` and ``corral supervise``: one that exited (killed, or
        ``corral serve`` refusing to start while PostgreSQL is unreachable) is started
        again a second later."""
        for h in self.hosts.hosts:
            for name, proc, start in (
                ("serve", h.serve, lambda h=h: h.start_serve(wait=False)),
                ("supervise", h.supervise, h.start_supervise),
            ):
                key = (h.i, name)
                if h.alive(proc) or key in self.restarting:
                    continue
                self.restarting.add(key)
                self.restarts[name] += 1

                def again(key: tuple[int, str] = key, start: Callable[[], None] = start) -> None:
                    self.restarting.discard(key)
                    start()

                self.later(RESTART_SEC, again)

    def housekeeping(self) -> None:
        """The watchdog, and the ends of faults (heal, SIGCONT, the clock back) due."""
        self.watchdog()
        now = time.monotonic()
        while self.ends and self.ends[0][0] <= now:
            _, _, action = heapq.heappop(self.ends)
            try:
                action()
            except Exception as exc:  # a harness step; noted
                print(f"chaos: an ending step failed: {exc!r}", file=sys.stderr)

    def faults_loop(self) -> None:
        end = self.t0 + self.seconds
        next_fault = time.monotonic() + self.rng.expovariate(1 / self.gap)
        kinds = list(KINDS)
        while not self.stop.is_set():
            self.watchdog()
            now = time.monotonic()
            while self.ends and self.ends[0][0] <= now:
                _, _, action = heapq.heappop(self.ends)
                try:
                    action()
                except Exception as exc:
                    print(f"chaos: an ending step failed: {exc!r}", file=sys.stderr)
            if now >= next_fault and now < end:
                kind = self.rng.choice(kinds)
                try:
                    self.inject(kind)
                except Exception as exc:
                    print(f"chaos: injecting {kind} failed: {exc!r}", file=sys.stderr)
                next_fault = time.monotonic() + self.rng.expovariate(1 / self.gap)
            if now >= end and not self.ends:
                return
            waits = [next_fault - now] if now < end else []
            if self.ends:
                waits.append(self.ends[0][0] - now)
            self.stop.wait(max(0.01, min([*waits, 0.2])))

    # -- continuous checks ------------------------------------------------------------

    def observe(self) -> None:
        admin = corral.connect(self.hosts.admin_url)  # plain: a failed look is skipped
        max_agents = admin.settings().max_agents
        try:
            while not self.stop.is_set():
                self.observe_once(admin, max_agents)
                self.stop.wait(1.0)
        finally:
            admin.close()

    def observe_once(self, admin: Any, max_agents: int) -> None:
        t = self.now()
        lead = self.leader()
        self.leaders.append((t, None if lead is None else lead.i))
        for h in self.hosts.hosts:
            for agent, pids in h.agent_pids().items():
                if len(pids) > 1:
                    self.duplicates += 1
                    self.violation("agent_once", agent=agent, pids=pids)
            for pid in h.pids():
                with contextlib.suppress(psutil.Error):
                    p = psutil.Process(pid)
                    self.rss[pid].append((t, p.memory_info().rss, p.name()))
        try:
            live = [n for n in admin.list_nodes() if n.status != "terminated"]
        except Exception:
            live = None
        with contextlib.suppress(Exception):  # PostgreSQL down this second
            held = Counter(a.agent_id for a in admin.list_assignments(limit=1000))
            for agent, n in held.items():
                if n > 1:
                    self.violation("activation_once", agent=agent, live_activations=n)
        if live is not None:
            self.max_live = max(self.max_live, len(live))
            if len(live) > max_agents:
                self.violation("max_agents", live=len(live), max_agents=max_agents)
        self.sample_log(t)

    def sample_log(self, t: float) -> None:
        """The event table's size and newest seq now: the growth check's sample, and
        when the harness saw each event (``_when``)."""
        with contextlib.suppress(psycopg.Error):
            with psycopg.connect(self.hosts.admin_url, autocommit=True, connect_timeout=3) as c:
                row = c.execute("SELECT count(*), coalesce(max(seq), 0) FROM events").fetchone()
            assert row is not None
            self.samples.append({"t": round(t, 1), "events": row[0], "tasks": len(self.acked)})
            self.seq_times.append((int(row[1]), time.monotonic()))


# -- the checks at the end, from the event log ------------------------------------------


def read_log(url: str) -> tuple[list[dict[str, Any]], dict[int, dict[str, Any]], dict[str, Any]]:
    with psycopg.connect(url, autocommit=True) as c:
        events = [
            {"seq": r[0], "ts": r[1], "kind": r[2], "node": r[3], "task": r[4], "data": r[5]}
            for r in c.execute(
                "SELECT seq, ts, kind, node_id, task_id, data FROM events ORDER BY seq"
            ).fetchall()
        ]
        tasks = {
            r[0]: {"status": r[1], "assigned_to": r[2], "epoch": r[3]}
            for r in c.execute("SELECT id, status, assigned_to, epoch FROM tasks").fetchall()
        }
        nodes = {
            r[0]: r[1]
            for r in c.execute(
                "SELECT DISTINCT ON (id) id, status FROM nodes ORDER BY id, incarnation DESC"
            ).fetchall()
        }
    for e in events:
        if isinstance(e["data"], str):
            e["data"] = json.loads(e["data"])
    return events, tasks, nodes


def check_log(camp: Campaign, beat: float) -> dict[str, Any]:
    events, tasks, nodes = read_log(camp.hosts.admin_url)
    # Order-independent: ``seq`` follows transaction ids, not commit order, so two
    # transactions on one row may appear in either order; every check goes by the
    # lease's epoch instead.
    completions: Counter[int] = Counter()
    claims: dict[tuple[int, int], str] = {}  # (task, epoch) -> claimer
    ended: set[tuple[int, int]] = set()  # (task, epoch) recovered or released
    done: list[dict[str, Any]] = []
    gave_up: set[int] = set()  # failed for good: its lease recovered max_attempts times
    for e in events:
        task, kind = e["task"], e["kind"]
        if task is None:
            continue
        epoch = e["data"].get("epoch")
        if kind == "task_claimed":
            claims[(task, int(epoch))] = e["node"]
        elif kind in ("lease_recovered", "lease_released", "task_failed") and epoch is not None:
            ended.add((task, int(epoch)))
        elif kind == "task_completed":
            completions[task] += 1
            done.append(e)
        if kind == "lease_recovered" and e["data"].get("outcome") == "failed":
            gave_up.add(task)
    stale = 0
    for e in done:
        key = (e["task"], int(e["data"]["epoch"]))
        if claims.get(key) != e["node"] or key in ended:
            stale += 1
            camp.violation(
                "no_stale_completion",
                task=e["task"],
                event=e["seq"],
                claimer=claims.get(key),
                ended=key in ended,
            )
    # Activations: every assignment of an agent but its last ended (released or
    # expired): the next one was taken only once it was free.
    assigned: dict[str, list[int]] = defaultdict(list)  # agent -> epochs
    finished: set[tuple[str, int]] = set()
    activations = 0
    for e in events:
        kind, d = e["kind"], e["data"]
        if kind == "activation_assigned":
            activations += 1
            assigned[d["agent"]].append(int(d["epoch"]))
        elif kind in ("activation_released", "activation_expired"):
            finished.add((d["agent"], int(d["epoch"])))
    for agent, epochs in assigned.items():
        for epoch in sorted(epochs)[:-1]:
            if (agent, epoch) not in finished:
                camp.violation(
                    "activation_once",
                    agent=agent,
                    epoch=epoch,
                    note="a later activation while this one never ended",
                )
    twice = [t for t, n in completions.items() if n > 1]
    for t in twice:
        camp.violation("done_once", task=t, completions=completions[t])
    status = Counter()
    for t in camp.acked:
        row = tasks.get(t)
        if row is None:
            camp.violation("acknowledged_kept", task=t)
            continue
        status[row["status"]] += 1
        if row["status"] == "done":
            if completions[t] != 1:
                camp.violation("done_once", task=t, completions=completions[t])
        elif row["status"] == "in_progress":
            if nodes.get(row["assigned_to"]) in (None, "terminated"):
                camp.violation("live_lease", task=t, holder=row["assigned_to"])
        elif row["status"] == "failed" and t in gave_up:
            pass  # corral's max_attempts: a task whose holders all went silent fails
        elif row["status"] != "pending":
            camp.violation("acknowledged_kept", task=t, status=row["status"])
    recoveries = check_recoveries(camp, events, beat)
    return {
        "events": len(events),
        "acknowledged": len(camp.acked),
        "final_status": dict(status),
        "completions_twice": len(twice),
        "stale_completions_accepted": stale,
        "failed_after_max_attempts_recoveries": sum(1 for t in camp.acked if t in gave_up),
        "activations_assigned": activations,
        "activations_released_by_runners": camp.activations,
        "late_completions_refused": sum(
            1 for e in events if e["kind"] == "lease_recovered"
        ),  # every recovered lease's holder, if it finished, was refused (its epoch)
        **recoveries,
    }


def _when(camp: Campaign, seq: int) -> float | None:
    """The monotonic moment the harness first saw an event at or past ``seq``."""
    for s, at in camp.seq_times:
        if s >= seq:
            return at
    return None


def _overlap(windows: list[Window], span: tuple[float, float]) -> float:
    return sum(max(0.0, min(w.end, span[1]) - max(w.start, span[0])) for w in windows)


def check_recoveries(camp: Campaign, events: list[dict[str, Any]], beat: float) -> dict[str, Any]:
    """Every lease recovered from a holder the faults made silent (none from a live
    one), at its threshold + 1 s, or later only within the bound of a fault that kept
    the monitors from acting (a window overlapping the span)."""
    threshold = MISSED_BEATS * beat
    late: list[float] = []
    excused = 0
    n = 0
    for e in events:
        if e["kind"] != "lease_recovered" or e["data"].get("reason") != "dead":
            continue
        n += 1
        stale = float(e["data"].get("stale_seconds", 0))
        excess = stale - threshold
        seen = _when(camp, e["seq"])
        if seen is None:
            seen = time.monotonic()
        # the harness sees an event up to its 1 s sampling later
        span = (seen - max(stale, threshold) - 2.0, seen)
        host = int(e["node"].split("-")[0][1:]) if e["node"].startswith("h") else None
        causes = [w for w in camp.windows if w.silent and w.host in (None, host)]
        if _overlap(causes, span) <= 0:
            camp.violation(
                "no_false_recovery", task=e["task"], node=e["node"], stale_s=stale, event=e["seq"]
            )
            continue
        if excess <= 1.0:
            late.append(excess)
            continue
        allowed = _overlap([w for w in camp.windows if w.monitor], (seen - excess - 1.0, seen))
        if excess <= 1.0 + allowed + 1.0:  # +1 s: the harness's 1 s sampling of seq
            excused += 1
            late.append(excess)
        else:
            camp.violation(
                "recovery_bound",
                task=e["task"],
                node=e["node"],
                excess_s=round(excess, 2),
                allowed_s=round(allowed, 2),
            )
    late.sort()
    return {
        "leases_recovered_dead": n,
        "recovered_past_threshold_plus_1s_excused_by_a_fault": excused,
        "recovery_excess_p50_s": round(late[len(late) // 2], 3) if late else None,
        "recovery_excess_max_s": round(late[-1], 3) if late else None,
    }


def _no_candidate(camp: Campaign, start: float, end: float, leader: int) -> float:
    """Seconds of [start, end] (monotonic) in which no monitor but the cut-off
    leader's could take the lead: PostgreSQL down or its sessions just ended (the
    monitors' backoff), or every other host down (partitioned, its server killed,
    stopped or its connections stalled). Sampled every 0.1 s."""
    glob = [w for w in camp.windows if w.host is None and w.monitor]
    others = [h.i for h in camp.hosts.hosts if h.i != leader]
    down = {i: [w for w in camp.windows if w.down and w.host == i] for i in others}

    def covered(ws: list[Window], t: float) -> bool:
        return any(w.start <= t <= w.end for w in ws)

    n = 0
    t = start
    while t < end:
        if covered(glob, t) or all(covered(down[i], t) for i in others):
            n += 1
        t += 0.1
    return n * 0.1


def check_leadership(camp: Campaign) -> dict[str, Any]:
    """After each cut-off of the leader, a live host's monitor leads within the
    bound: a killed leader's lock is released at once and taken at the next tick of
    another monitor (0.5 s; up to 5 s when that monitor is backing off from an
    outage); a stopped or cut-off one's once the server ends its session
    (docs/deploy.md, "Several hosts"), plus any time in which no other monitor could
    lead (PostgreSQL down, every other host down). The move is known to within the
    observer's sampling: the check uses the last sample that had not seen it."""
    worst = 0.0
    bounds = {
        "kill": OUTAGE_BACKOFF + 1.0,
        "sigstop": LEADER_STOP_BOUND,
        "partition": LEADER_CUT_BOUND,
    }
    for move in camp.leader_moves:
        low = move.get("moved_after_low_s")
        bound = bounds[move["how"]]
        if low is not None and low > bound:
            at = camp.t0 + move["t"]
            bound += _no_candidate(camp, at, at + low, move["from"])
        move["bound_s"] = round(bound, 2)
        if low is None or low > bound:
            camp.violation("leader_moved", **move)
        else:
            worst = max(worst, move["moved_after_s"])
    return {"leader_cut_offs": len(camp.leader_moves), "leader_moved_max_s": worst}


def check_growth(camp: Campaign) -> dict[str, Any]:
    """RSS of each process alive a minute or more, from 30 s after it started: its
    last third's median within 1.5x (+30 MB) of its first third's; event rows per
    acknowledged task: the second half's rate within 2x the first's."""
    grew = []
    for pid, all_samples in camp.rss.items():
        samples = all_samples[30:]  # from 30 s on: a start-up (imports) is no growth
        if len(samples) < 30:
            continue
        k = len(samples) // 3
        first = sorted(s[1] for s in samples[:k])[k // 2]
        last = sorted(s[1] for s in samples[-k:])[k // 2]
        if last > first * 1.5 + 30e6:
            grew.append(
                {"pid": pid, "name": samples[0][2], "first_mb": first / 1e6, "last_mb": last / 1e6}
            )
    for g in grew:
        camp.violation("rss_bounded", **g)
    s = camp.samples
    ratio = None
    if len(s) >= 20:
        mid = len(s) // 2
        rate = lambda a, b: (b["events"] - a["events"]) / max(1, b["tasks"] - a["tasks"])  # noqa: E731
        r1, r2 = rate(s[0], s[mid]), rate(s[mid], s[-1])
        ratio = round(r2 / r1, 2) if r1 else None
        if ratio is not None and ratio > 2.0:
            camp.violation("events_bounded", first_half_per_task=r1, second_half_per_task=r2)
    peak = max((max(x[1] for x in v) for v in camp.rss.values()), default=0)
    return {
        "processes_sampled": len(camp.rss),
        "rss_peak_mb": round(peak / 1e6, 1),
        "events_per_task_ratio_2nd_to_1st_half": ratio,
    }


def settle(camp: Campaign, deadline: float, loads: list[threading.Thread]) -> bool:
    """After the faults: everything healed and running; the load's last adds
    answered (acknowledged or not); wait until every acknowledged task is done."""
    for h in camp.hosts.hosts:
        net.heal(h.i)
        h.partitioned = False
        h.set_clock(0)
        h.db_proxy.clear()
        h.http_proxy.clear()
    for pid in list(camp.stopped):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        camp.housekeeping()
        if any(m["moved_after_s"] is None for m in camp.leader_moves):
            time.sleep(1.0)  # the observer has yet to see where the lead went
            continue
        if any(t.is_alive() for t in loads):
            time.sleep(1.0)  # a load's last add has yet to answer (each ends at the end)
            continue
        ids = list(camp.acked)  # with any acknowledged after the faults, through a retry
        with contextlib.suppress(psycopg.Error):
            with psycopg.connect(camp.hosts.admin_url, autocommit=True) as c:
                left = c.execute(
                    "SELECT count(*) FROM tasks WHERE id = ANY(%s)"
                    " AND status IN ('pending', 'in_progress')",
                    [ids],
                ).fetchone()
            if left is not None and left[0] == 0:
                return True
        time.sleep(1.0)
    return False


def run(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="corral-chaos-") as d:
        hosts = Hosts(args.hosts, Path(d), workers=args.workers, beat=args.beat)
        try:
            hosts.up(max_agents=args.hosts * (args.workers + 1))  # + a runner per host
            admin = corral.connect(hosts.admin_url)
            for k in range(AGENTS):
                admin.add_agent(f"agent-{k}")
            admin.close()
            camp = Campaign(hosts, args.seed, args.minutes * 60, args.rate, args.gap)
            loads = [
                threading.Thread(target=camp.load, args=(h,), daemon=True) for h in hosts.hosts
            ]
            threads = [*loads]
            threads += [
                threading.Thread(target=camp.runner, args=(h,), daemon=True) for h in hosts.hosts
            ]
            threads.append(threading.Thread(target=camp.observe, daemon=True))
            for t in threads:
                t.start()
            camp.faults_loop()
            load_stopped = camp.now()
            drained = settle(camp, args.settle, loads)
            camp.sample_log(camp.now())  # events of the drain's last second are seen now
            camp.stop.set()
            for t in threads:
                t.join(30)
            camp.sample_log(camp.now())  # and any the joins let through, before the read
            log = check_log(camp, args.beat)
            if not drained:
                camp.violation("drained", note="acknowledged tasks not done after the faults")
            lead = check_leadership(camp)
            growth = check_growth(camp)
        finally:
            logs = {}
            for h in hosts.hosts:
                for name in ("serve", "supervise"):
                    with contextlib.suppress(OSError):
                        logs[f"host{h.i}/{name}"] = (h.folder / f"{name}.log").read_text()[-4000:]
            hosts.down()
    counts = Counter(f.kind for f in camp.faults)
    checked = {
        "done_once": "every acknowledged task done once (or pending / in progress, live lease)",
        "no_stale_completion": "no completion accepted from a stale epoch",
        "max_agents": f"live nodes <= max_agents (peak {camp.max_live})",
        "agent_once": "no supervised agent running twice",
        "recovery_bound": "silent holders' leases recovered at threshold + 1 s (+ a fault's bound)",
        "no_false_recovery": "no lease recovered from a holder no fault silenced",
        "leader_moved": "leadership on a live host within its bound after a cut-off",
        "rss_bounded": "no process's RSS growing without bound",
        "events_bounded": "event rows per task not growing",
        "drained": "no acknowledged task pending or in progress once the faults end",
        "live_lease": "an in-progress task's holder is live",
        "activation_once": "no activation held twice (the event log's assign / release / expiry)",
        "acknowledged_kept": "every acknowledged task exists (failed only after max_attempts)",
    }
    by_inv = Counter(v["invariant"] for v in camp.violations)
    return {
        "bench": "chaos",
        "note": args.note,
        "seed": args.seed,
        "hosts": args.hosts,
        "workers_per_host": args.workers,
        "minutes": args.minutes,
        "heartbeat_s": args.beat,
        "tasks_per_s": args.rate,
        "mean_fault_gap_s": args.gap,
        "faults_total": len(camp.faults),
        "faults": {k: counts.get(k, 0) for k in KINDS},
        "invariants": {k: {"what": v, "violations": by_inv.get(k, 0)} for k, v in checked.items()},
        "violations": camp.violations[:200],
        "violations_total": len(camp.violations),
        "load_stopped_s": round(load_stopped, 1),
        "add_failures": camp.add_failures,
        "activation_failures": camp.activation_failures,
        "watchdog_restarts": dict(camp.restarts),
        "log": log,
        "leadership": lead,
        "leader_moves": camp.leader_moves,
        "growth": growth,
        "fault_list": [f.__dict__ for f in camp.faults],
        "logs_tail": logs if camp.violations else {},
        "machine": machine_info(),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hosts", type=int, default=3)
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--seed", type=int, default=31)
    ap.add_argument("--workers", type=int, default=2, help="SDK workers per host")
    ap.add_argument("--beat", type=float, default=2.0, help="the workers' heartbeat interval")
    ap.add_argument("--rate", type=float, default=2.0, help="tasks added per second")
    ap.add_argument("--gap", type=float, default=1.6, help="mean seconds between faults")
    ap.add_argument("--settle", type=float, default=180.0, help="seconds to drain at the end")
    ap.add_argument("--out", type=Path, default=RESULTS_DIR / "chaos.json")
    ap.add_argument("--note", default="", help="recorded in the JSON (the code run, say)")
    args = ap.parse_args(argv)
    try:
        net.check_permitted()
    except net.NotPermittedError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    # the harness's own clients meet the outages it causes: quietly
    logging.getLogger("corral.outage").setLevel(logging.ERROR)
    result = run(args)
    write_json(args.out, result)
    rows = [(k, n) for k, n in result["faults"].items()]
    print(table(["fault", "injected"], [*rows, ("total", result["faults_total"])]))
    print()
    inv = [(k, v["violations"], v["what"]) for k, v in result["invariants"].items()]
    print(table(["invariant", "violations", "what"], inv))
    log = result["log"]
    print(
        f"\n{log['acknowledged']} tasks acknowledged, {log['leases_recovered_dead']} leases"
        f" recovered from silent holders, the leader cut off"
        f" {result['leadership']['leader_cut_offs']} times; JSON: {args.out}"
    )
    if result["violations_total"]:
        print(
            f"FAILED: {result['violations_total']} violations; replay with --seed {args.seed}"
            f" --hosts {args.hosts} --minutes {args.minutes}",
            file=sys.stderr,
        )
        for v in result["violations"][:20]:
            print(f"  {v}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
