"""Pools at run time: a supervisor whose agents include pool members, spawned and
retired on the cluster's advice.

:class:`FleetSupervisor` is the supervisor of :mod:`corral.supervisor.supervisor`
(same restart policies, logs, control socket, cluster reports) plus its pools. A
member of pool ``dev`` is the agent ``dev-<n>`` (the lowest free number), with the
supervisor's environment contract: ``CORRAL_URL``, ``CORRAL_AGENT_ID`` (its node id),
a node token of its own when the cluster is served over HTTP (never the operator's),
and ``CORRAL_POOL``/``CORRAL_ROLE``.

Every :data:`POOL_INTERVAL`, and at once when :meth:`FleetSupervisor.wake` is called,
the pools look at the cluster (its assessment, its nodes, its settings) and apply
:func:`corral.scaling.decide` to each pool in manifest order, counting the members
each spawns against ``max_agents`` before the next pool decides:

- **spawn**: a new member, once every agent it depends on is RUNNING;
- **ask**: one spawn request per wanted member (:mod:`corral.fleet.requests`);
  an accepted request is spawned as soon as ``max_agents`` leaves room; a pending
  one the pool no longer wants is withdrawn, with the reason;
- **retire**: SIGTERM to a member whose node is idle and not needed
  (:func:`corral.scaling.retiring`: idle beyond the one kept in reserve past the
  pending tasks, or idle for the cluster's ``idle_timeout``; the worker SDK hands its
  leases back and exits 0).

Retirement goes only through the worker's idle protocol: a member that exits 0 (the
SDK worker retires itself after ``idle_timeout``), or whose node the cluster retired
for idleness, is STOPPED and not restarted by its restart policy; any other exit
(a crash, a kill) is restarted by it (``on-failure``), which replaces the member,
but not before the cluster has declared the old node dead (its leases recovered at
their threshold): the replacement registers as a new incarnation.
Each change of a pool's size is one ``alert`` event with ``reason: pool_scaled``
(pool, from, to, why, ``cause``: ``decision`` or ``exit`` for members that stopped by
themselves, ``at``, and the pool's ``min``, ``max`` and ``scale``), down to 0, so the
fleet's history is in the cluster's events.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from corral.budgets import MICROS, pool_hold
from corral.errors import CorralError
from corral.fleet.manifest import FleetManifest, PoolSpec
from corral.fleet.requests import Look, Requests, unwanted
from corral.lifecycle import liveness_window
from corral.model import Node
from corral.scaling import (
    Decision,
    FleetView,
    PoolState,
    count_members,
    decide,
    retiring,
)
from corral.supervisor.agent import Agent
from corral.supervisor.policy import RestartTracker, State
from corral.supervisor.supervisor import Supervisor

__all__ = ["POOL_INTERVAL", "FleetSupervisor", "Observation", "PoolRuntime"]

log = logging.getLogger("corral.fleet")

POOL_INTERVAL = 0.2  # seconds between two looks of the pools at the cluster
RESTART_MARGIN = 0.2  # seconds after the old node's death a crashed member restarts


@dataclass(slots=True)
class PoolRuntime:
    """One pool's memory between decisions."""

    spec: PoolSpec
    last_change: float | None = None
    last_direction: int = 0  # 1 the last change grew the pool, -1 shrank it, 0 not known
    last_decision: Decision | None = None
    retiring: set[str] = field(default_factory=set)
    size: int | None = None  # the member count the last pool event recorded


@dataclass(frozen=True, slots=True)
class Observation:
    """What the pools read of the cluster in one look."""

    recommendation: str
    pending: int
    max_agents: int
    idle_timeout: float
    nodes: dict[str, Node]  # the newest incarnation of every node, by id
    requests: Look = field(default_factory=Look)  # the ask-mode pools' spawn requests
    # Why a pool may not grow: a spent budget in its scope (corral.budgets.pool_hold)
    holds: dict[str, str] = field(default_factory=dict)
    model_caps: dict[str, int] = field(default_factory=dict)


class FleetSupervisor(Supervisor):
    """A :class:`Supervisor` with pools; see the module docstring."""

    def __init__(self, fleet: FleetManifest, **kwargs: Any) -> None:
        super().__init__(fleet.supervisor, **kwargs)
        self.fleet = fleet
        self.pools = {p.id: PoolRuntime(p) for p in fleet.pools}
        self._pool_wake = asyncio.Event()
        self._pool_task: asyncio.Task[None] | None = None
        self._nodes: dict[str, Node] = {}  # the last look's, for the policy's inputs
        self._settings: Any = None
        # the requests' writes step decided, sent off the loop before the next look
        self._writes: list[tuple[Callable[[], Any], Callable[[], Any] | None]] = []
        asking = {p.id for p in fleet.pools if p.limits.scale == "ask"}
        self.requests = Requests(self.client, asking) if asking and self.client else None

    # ---- running ------------------------------------------------------------------

    async def run(self) -> None:
        self._pool_task = asyncio.ensure_future(self._pool_loop())
        try:
            await super().run()
        finally:
            self._pool_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._pool_task

    def wake(self) -> None:
        """Look at the cluster now (something changed)."""
        self._pool_wake.set()

    async def _pool_loop(self) -> None:
        while not self.shutting_down:
            try:
                seen = await asyncio.to_thread(self.observe)
                if not self.shutting_down:
                    self.step(self.clock(), seen)
            except CorralError as exc:  # the cluster unreachable: supervise on, retry
                self.log("warning", "pools: cannot read the cluster", error=str(exc))
            await self._write()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._pool_wake.wait(), POOL_INTERVAL)
            self._pool_wake.clear()

    async def _write(self) -> None:
        """Send what the last step decided for the requests (in order, each in a
        thread: no blocking call on the loop) before the next look."""
        writes, self._writes = self._writes, []
        for call, done in writes:
            try:
                ok = await asyncio.to_thread(call)
            except CorralError as exc:  # unreachable: the next look sees what is left
                self.log("warning", "pools: cannot write to the cluster", error=str(exc))
                continue
            if done is not None and ok is not False:
                done()

    def observe(self) -> Observation:
        """Read what the decisions need (blocking: runs in a thread)."""
        c = self.client
        a = c.assess_workload()
        s = c.settings()
        self._settings = s  # for restart_not_before, on the loop
        nodes = {n.id: n for n in c.list_nodes()}
        return Observation(
            a.recommendation,
            a.pending_tasks,
            a.max_agents,
            float(s.idle_timeout_seconds),
            nodes,
            Look() if self.requests is None else self.requests.look(),
            self._budget_holds(s.budgets),
            dict(s.model_caps),
        )

    def _budget_holds(self, budgets: list[dict[str, Any]]) -> dict[str, str]:
        """Each pool covered by a spent budget, and why (a read of each budget's
        usage; none without budgets)."""
        if not budgets:
            return {}
        used: dict[tuple[str, str], tuple[int, int]] = {}
        for b in budgets:
            key = (b["scope"], b["window"])
            if key not in used:
                u = self.client.usage(*key)
                used[key] = (u.input_tokens + u.output_tokens, round(u.cost_usd * MICROS))
        holds = {}
        for rt in self.pools.values():
            p = rt.spec
            why = pool_hold(p.id, p.role, p.model, used, budgets, {}, 0)
            if why is not None:
                holds[p.id] = why
        return holds

    def _hold(self, pool: PoolSpec, seen: Observation, starting: list[str]) -> str | None:
        """Why ``pool`` may not grow now: a spent budget, or its model at its cap (its
        live nodes and the members of its model's pools still starting)."""
        if pool.id in seen.holds:
            return seen.holds[pool.id]
        if pool.model is None or pool.model not in seen.model_caps:
            return None
        live = sum(
            1 for n in seen.nodes.values() if n.status != "terminated" and n.model == pool.model
        )
        same = {p.spec.id for p in self.pools.values() if p.spec.model == pool.model}
        live += sum(
            1 for a in starting if (p := self.fleet.pool_of(a)) is not None and p.id in same
        )
        return pool_hold(pool.id, pool.role, pool.model, {}, [], seen.model_caps, live)

    # ---- ask mode: corral ctl requests | accept ID | decline ID --------------------

    async def spawn_requests(self) -> list[dict[str, Any]]:
        """The cluster's spawn requests, oldest first."""
        found = await asyncio.to_thread(self.client.spawn_requests, None, None, 10_000)
        return [r.to_dict() for r in found]

    async def accept_request(self, request_id: int) -> dict[str, Any]:
        """Accept a pending spawn request as the operator; the pool spawns for it."""
        r = await asyncio.to_thread(self.client.accept_spawn_request, request_id)
        self.wake()
        return dict(r.to_dict())

    async def decline_request(self, request_id: int) -> dict[str, Any]:
        """Decline a pending spawn request as the operator."""
        r = await asyncio.to_thread(self.client.decline_spawn_request, request_id)
        self.wake()
        return dict(r.to_dict())

    # ---- the decisions ------------------------------------------------------------

    def members(self, pool_id: str) -> list[Agent]:
        """The pool's members that are alive, starting or due to restart."""
        out = []
        for a in self.agents.values():
            p = self.fleet.pool_of(a.spec.id)
            if p is None or p.id != pool_id:
                continue
            if a.child is not None or a.pending_start:  # held for a dependency too
                out.append(a)
        return out

    def step(self, now: float, seen: Observation) -> dict[str, Decision]:
        """Apply every pool's decision at ``now``; return them by pool."""
        self._nodes = seen.nodes
        live_nodes = {n.id for n in seen.nodes.values() if n.status != "terminated"}
        starting = [
            a.spec.id for p in self.pools for a in self.members(p) if a.spec.id not in live_nodes
        ]
        live = len(live_nodes) + len(starting)
        out: dict[str, Decision] = {}
        for rt in self.pools.values():
            pool = rt.spec
            members = [a for a in self.members(pool.id) if a.spec.id not in rt.retiring]
            if rt.size is None:
                rt.size = len(members)  # what this run starts with (adopted members)
            elif rt.size != len(members):  # members that stopped by themselves (retired, gave up)
                rt.last_change = now  # a change of the pool's size: the cooldown starts
                rt.last_direction = 1 if len(members) > rt.size else -1
                self._record_size(rt, now, len(members), "members stopped", "exit")
            looks: list[tuple[str | None, float | None]] = []
            for a in members:
                node = seen.nodes.get(a.spec.id)
                if node is None or a.spec.id in starting:
                    looks.append((None, None))  # starting: it will claim once registered
                else:
                    looks.append((node.status, node.idle_since))
            idle, expired = count_members(looks, seen.idle_timeout, now, pending=seen.pending)
            asks = seen.requests
            if pool.id in asks.declined:  # a no counts as a change: ask again after cooldown
                rt.last_change = max(rt.last_change or 0.0, asks.declined[pool.id])
                rt.last_direction = 0
            accepted = asks.accepted.get(pool.id, [])
            waiting = 0
            hold = self._hold(pool, seen, starting)
            for req in accepted:  # an operator's yes: spawned when there is room
                if (
                    live < seen.max_agents
                    and hold is None
                    and self._deps_ready(pool)
                    and self.requests
                ):
                    member = self._add_member(rt, now, f"request {req} accepted")
                    fulfil = functools.partial(self.requests.fulfilled, req, member)
                    self._writes.append((fulfil, None))
                    live += 1
                    idle += 1
                    members.append(self.agents[member])
                    self._scaled(rt, now, len(members) - 1, len(members), f"request {req}")
                else:
                    waiting += 1
            state = PoolState(
                members=len(members),
                idle=idle,
                idle_expired=expired,
                requested=waiting,
                last_change=rt.last_change,
                last_direction=rt.last_direction,
            )
            view = FleetView(seen.recommendation, seen.pending, live, seen.max_agents)
            pending = asks.pending.get(pool.id, [])
            if self.requests is not None and pending:
                pending = self._withdraw(pool, state, view, pending, hold)
            state = replace(state, requested=waiting + len(pending))
            d = decide(pool.role, pool.limits, state, view, now, hold=hold)
            rt.last_decision = d
            out[pool.id] = d
            if d.action == "spawn" and self._deps_ready(pool):
                before = len(members)
                for _ in range(d.change):
                    self._add_member(rt, now, d.reason)
                live += d.change
                self._scaled(rt, now, before, before + d.change, d.reason)
            elif d.action == "ask" and self.requests is not None:
                why = f"{d.reason}: {_counts(view, state)}"  # shown by corral ctl requests
                ask = functools.partial(self.requests.ask, pool.id, pool.role, why)
                self._writes += [(ask, None)] * d.change
                rt.last_change = now
                rt.last_direction = 0
            elif d.action == "retire":
                due = retiring(looks, seen.idle_timeout, now, pending=seen.pending)
                chosen = [members[i] for i in due][: -d.change]
                for a in chosen:
                    rt.retiring.add(a.spec.id)
                    self.spawn_task(functools.partial(self._retire, rt, a))
                self._scaled(rt, now, len(members), len(members) - len(chosen), d.reason)
        return out

    def _withdraw(
        self,
        pool: PoolSpec,
        state: PoolState,
        view: FleetView,
        pending: list[int],
        hold: str | None = None,
    ) -> list[int]:
        """Withdraw the pool's pending requests it no longer wants (newest first), or
        every one while it may not grow (``hold`` says why); the ones still pending."""
        n = unwanted(pool.role, pool.limits, state, view, len(pending))
        if hold is not None:
            n = len(pending)
        if n == 0 or self.requests is None:
            return pending
        why = f"no longer wanted: {view.recommendation}: {_counts(view, state)}"
        if hold is not None:
            why = f"withdrawn: {hold}"
        keep, drop = pending[: len(pending) - n], pending[len(pending) - n :]
        for req in reversed(drop):
            done = functools.partial(
                self.log, "info", "spawn request withdrawn", pool=pool.id, request=req, why=why
            )
            self._writes.append((functools.partial(self._withdraw_one, req, why), done))
        return keep

    def _withdraw_one(self, req: int, why: str) -> bool:
        """Withdraw one request (blocking: in a thread); False when it was decided
        meanwhile (the next look sees it)."""
        assert self.requests is not None
        try:
            self.requests.withdraw(req, why)
        except CorralError:
            return False
        return True

    def _deps_ready(self, pool: PoolSpec) -> bool:
        return all(self.agents[d].state is State.RUNNING for d in pool.template.depends_on)

    def _member_agent(self, pool: PoolSpec, n: int) -> Agent:
        """The runtime record of member ``n`` of ``pool`` (made on first use; the
        member joins the manifest, so dependencies and the cascade stop see it)."""
        spec = pool.member(n)
        a = self.agents.get(spec.id)
        return a if a is not None else self.add_agent(spec)

    def on_recover(self, records: dict[str, Any]) -> None:
        """Members a previous run left in ``pids.json`` are known before adoption, so
        the ones still running are adopted (not restarted, not orphans)."""
        for agent_id in records:
            pool = self.fleet.pool_of(agent_id)
            if pool is not None and agent_id not in self.agents:
                self._member_agent(pool, int(agent_id.rsplit("-", 1)[1]))

    def _add_member(self, rt: PoolRuntime, now: float, reason: str) -> str:
        """Spawn the pool's next member (the lowest free number); its id."""
        n = 1
        while True:
            spec = rt.spec.member(n)
            a = self.agents.get(spec.id)
            if a is None or (a.child is None and not a.pending_start and a.stopping is None):
                break
            n += 1
        if a is None:
            a = self._member_agent(rt.spec, n)
        else:
            a.tracker = RestartTracker(
                config=self.manifest.settings.restart_config(), rand=self.rand
            )
        a.operator_stopped = False
        rt.retiring.discard(spec.id)
        self.log("info", "pool member spawned", pool=rt.spec.id, agent=spec.id, reason=reason)
        self.launch(a, reason)
        self.kick()
        return spec.id

    async def _retire(self, rt: PoolRuntime, a: Agent) -> None:
        """SIGTERM an idle member (its leases go back); it stays STOPPED."""
        try:
            self.log("info", "pool member retired", pool=rt.spec.id, agent=a.spec.id)
            await self.stop(a.spec.id)
        finally:
            rt.retiring.discard(a.spec.id)

    def _scaled(self, rt: PoolRuntime, now: float, old: int, new: int, why: str) -> None:
        """A decision of the pool changed its size (the cooldown starts now)."""
        rt.last_change = now
        rt.last_direction = (new > old) - (new < old)
        if rt.size is None:
            rt.size = old
        self._record_size(rt, now, new, why, "decision")

    def _record_size(self, rt: PoolRuntime, now: float, new: int, why: str, cause: str) -> None:
        """One ``pool_scaled`` event per change of the pool's size, none for a non-change:
        ``cause`` is ``decision`` (the pool spawned or retired) or ``exit`` (members
        stopped by themselves: the worker's own retirement, a restart given up)."""
        old, rt.size = rt.size, new
        if self.client is None or old == new:
            return
        message = f"pool {rt.spec.id}: {old} -> {new} members ({why})"
        data = {
            "reason": "pool_scaled",
            "pool": rt.spec.id,
            "role": rt.spec.role,
            "from": old,
            "to": new,
            "why": why,
            "cause": cause,
            "at": now,
            "min": rt.spec.limits.min,
            "max": rt.spec.limits.max,
            "scale": rt.spec.limits.scale,
        }

        async def record() -> None:
            with contextlib.suppress(CorralError):
                await asyncio.to_thread(self.client.alert, message, **data)

        self.spawn_task(record)

    # ---- retirement is not a crash ------------------------------------------------

    def retired_by_cluster(self, a: Agent) -> bool:
        """A member whose node the cluster retired for idleness (terminated, not
        dead) is not restarted, whatever its policy: read from the nodes the pools
        last looked at (no call to the cluster on the loop)."""
        node = self._nodes.get(a.spec.id) if self.fleet.pool_of(a.spec.id) else None
        return node is not None and node.status == "terminated" and node.dead_at is None

    def restart_not_before(self, a: Agent) -> float | None:
        """A crashed member's replacement starts once the cluster has declared the
        old node dead (its leases recovered at their threshold), so it registers as
        a new incarnation instead of inheriting a lease it knows nothing of. A member
        the last look did not see yet (it registered since) is looked up off the
        loop, and a restart granted meanwhile is put off to that bound."""
        if self.fleet.pool_of(a.spec.id) is None or self.client is None:
            return None
        node = self._nodes.get(a.spec.id)
        if node is None:
            self.spawn_task(functools.partial(self._bound_restart, a))
            return None
        return self._dead_by(node)

    def _dead_by(self, node: Node) -> float | None:
        if node.status == "terminated" or self._settings is None:
            return None
        window = liveness_window(node.heartbeat_interval, self._settings)
        # the last look may predate its last beat, not its exit (now)
        return max(node.last_seen, self.clock()) + window + RESTART_MARGIN

    async def _bound_restart(self, a: Agent) -> None:
        try:
            node = await asyncio.to_thread(self.client.get_node, a.spec.id)
            if self._settings is None:
                self._settings = await asyncio.to_thread(self.client.settings)
        except CorralError:
            return  # no such node (it never registered), or the cluster unreachable
        bound = self._dead_by(node)
        if bound is not None and a.child is None and a.restart_at is not None:
            a.restart_at = max(a.restart_at, bound)
            self.kick()


def _counts(view: FleetView, state: PoolState) -> str:
    """What a spawn request's reason says of the board and the pool."""
    return f"{view.pending} pending tasks, {state.members} members ({state.idle} idle)"
