"""The scheduler's operations of ``corral.Cluster`` (mixed into it): agents, their
inboxes, and runners' assignments. Each validates its arguments (an
``InvalidInputError`` naming the field, nothing written) and makes one store call."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

from corral.errors import InvalidInputError, LeaseError
from corral.params import ActorName, Epoch, JsonValue, Limit, NodeId
from corral.scheduler.agentconfig import check_config
from corral.scheduler.policy import MODES
from corral.tokens import OPERATOR
from corral.validation import MAX_INT, check_payload, checked, one_of

if TYPE_CHECKING:
    from corral.clock import Clock
    from corral.scheduler.records import Agent, Assignment, Notification
    from corral.store import Store

__all__ = ["ActivationLostError", "SchedulerOps", "activation_lost"]

_COUNTS = ("posts", "comments", "inbox_read")


def _outcome(outcome: Any) -> dict[str, Any]:
    if outcome is None:
        return {}
    if not isinstance(outcome, dict):
        raise InvalidInputError("outcome must be an object of counts", field="outcome")
    for key in _COUNTS:
        v = outcome.get(key, 0)
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= MAX_INT:
            raise InvalidInputError(
                f"outcome.{key} must be a non-negative integer", field=f"outcome.{key}"
            )
    check_payload(outcome, "outcome")
    return dict(outcome)


ModeName = Annotated[str, one_of(*MODES)]
"""How a runner is assigned (``corral.scheduler.policy.MODES``)."""


class ActivationLostError(LeaseError):
    """The runner no longer holds the activation it names (released already,
    expired, or another runner's): a ``LeaseError`` whose next step is an
    activation's, not a task's."""

    hint = "That activation is over: call get_assignment for the next one."


def activation_lost(exc: LeaseError) -> ActivationLostError:
    """``exc`` (a release refused, maybe mapped back from HTTP as a plain
    ``LeaseError``) with the activation's hint."""
    if isinstance(exc, ActivationLostError):
        return exc
    return ActivationLostError(exc.message, field=exc.field)


class SchedulerOps:
    """The activation scheduler's operations (``corral.scheduler``)."""

    if TYPE_CHECKING:
        store: Store
        clock: Clock

    @checked
    def add_agent(
        self,
        agent_id: NodeId,
        config: dict[str, Any] | None = None,
        *,
        actor: ActorName | None = None,
    ) -> Agent:
        """Add an agent to activate, or replace its config (its place in the order and
        its counts stay). An ``agent_added`` event names the ``actor`` (``operator``
        when not given; the server names the caller).

        ``config`` holds the agent's ``interests``, ``watch_communities``,
        ``can_create_posts``, ``max_daily_posts``, ``max_daily_comments``,
        ``discovery`` preferences, ``schedule_override`` cron entries (``cron``,
        ``task``, ``tz``) and ``min_activation_interval`` (seconds); unknown keys are
        refused."""
        return self.store.add_agent(
            agent_id,
            check_config({} if config is None else config),
            self.clock.now(),
            actor=OPERATOR if actor is None else actor,
        )

    @checked
    def get_agent(self, agent_id: NodeId) -> Agent:
        """One agent to activate, with its unread count, last activation and caps;
        ``NotFoundError`` when unknown."""
        return self.store.get_agent(agent_id)

    @checked
    def list_agents(self, after: str = "", limit: Limit = 100) -> list[Agent]:
        """Agents to activate, by id (at most ``limit``, those after ``after``)."""
        if not isinstance(after, str) or len(after) > 64:
            raise InvalidInputError("after must be an agent id (or empty)", field="after")
        return self.store.list_agents(after, limit)

    @checked
    def notify(self, agent_id: NodeId, payload: JsonValue) -> Notification:
        """Put an item in an agent's inbox (``payload``: JSON, at most 64 KiB).

        Agents with unread items are activated first, most unread first."""
        return self.store.notify(agent_id, payload, self.clock.now())

    @checked
    def read_inbox(self, agent_id: NodeId, limit: Limit = 100) -> list[Notification]:
        """An agent's unread inbox items, oldest first (at most ``limit``), marked read."""
        return self.store.read_inbox(agent_id, limit, self.clock.now())

    @checked
    def get_assignment(self, runner_id: NodeId, mode: ModeName = "hybrid") -> Assignment | None:
        """Activate the next agent for a runner: inbox first (most unread), then due
        cron overrides, then the stalest; None when nothing is due.

        ``mode``: ``notification`` (inbox only), ``exploration`` (no inbox) or
        ``hybrid`` (both). The runner is a registered node; the activation is a lease
        until the runner releases it, its node ends, or ``activation_ttl`` passes."""
        return self.store.assign(runner_id, mode, self.clock.now())

    @checked
    def release_assignment(
        self,
        assignment_id: Epoch,
        runner_id: NodeId,
        epoch: Epoch,
        outcome: dict[str, Any] | None = None,
    ) -> Agent:
        """End an activation: the agent's ``last_activated_at`` and
        ``activation_count`` are set and ``outcome`` (``posts``, ``comments``,
        ``inbox_read`` and free-form fields) is recorded against its daily caps.

        ``LeaseError`` (nothing changed; its hint names ``get_assignment``) when the
        runner does not hold it at ``epoch``: released already, expired, or another
        runner's."""
        try:
            return self.store.release_activation(
                assignment_id,
                runner_id,
                epoch,
                _outcome(outcome),
                self.clock.now(),
            )
        except LeaseError as exc:
            raise activation_lost(exc) from None

    @checked
    def list_assignments(self, limit: Limit = 100) -> list[Assignment]:
        """The live activations (who holds which agent, until when), oldest first."""
        return self.store.list_assignments(limit)
