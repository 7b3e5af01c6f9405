"""The scheduler's operations of ``corral.Cluster`` (mixed into it): agents, their
inboxes, and runners' assignments. Each validates its arguments (an
``InvalidInputError`` naming the field, nothing written) and makes one store call."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from corral.errors import InvalidInputError, LeaseError
from corral.scheduler.agentconfig import check_config
from corral.scheduler.policy import MODES
from corral.validation import MAX_INT, check_choice, check_id, check_limit, check_payload

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

    def add_agent(self, agent_id: str, config: dict[str, Any] | None = None) -> Agent:
        """Add an agent to activate, or replace its config (its place in the order and
        its counts stay).

        ``config`` holds the agent's ``interests``, ``watch_communities``,
        ``can_create_posts``, ``max_daily_posts``, ``max_daily_comments``,
        ``discovery`` preferences, ``schedule_override`` cron entries (``cron``,
        ``task``, ``tz``) and ``min_activation_interval`` (seconds); unknown keys are
        refused."""
        return self.store.add_agent(
            check_id(agent_id, "agent_id"),
            check_config({} if config is None else config),
            self.clock.now(),
        )

    def get_agent(self, agent_id: str) -> Agent:
        """One agent to activate, with its unread count, last activation and caps;
        ``NotFoundError`` when unknown."""
        return self.store.get_agent(check_id(agent_id, "agent_id"))

    def list_agents(self, after: str = "", limit: int = 100) -> list[Agent]:
        """Agents to activate, by id (at most ``limit``, those after ``after``)."""
        if not isinstance(after, str) or len(after) > 64:
            raise InvalidInputError("after must be an agent id (or empty)", field="after")
        return self.store.list_agents(after, check_limit(limit))

    def notify(self, agent_id: str, payload: Any) -> Notification:
        """Put an item in an agent's inbox (``payload``: JSON, at most 64 KiB).

        Agents with unread items are activated first, most unread first."""
        agent_id = check_id(agent_id, "agent_id")
        check_payload(payload, "payload")
        return self.store.notify(agent_id, payload, self.clock.now())

    def read_inbox(self, agent_id: str, limit: int = 100) -> list[Notification]:
        """An agent's unread inbox items, oldest first (at most ``limit``), marked read."""
        return self.store.read_inbox(
            check_id(agent_id, "agent_id"), check_limit(limit), self.clock.now()
        )

    def get_assignment(self, runner_id: str, mode: str = "hybrid") -> Assignment | None:
        """Activate the next agent for a runner: inbox first (most unread), then due
        cron overrides, then the stalest; None when nothing is due.

        ``mode``: ``notification`` (inbox only), ``exploration`` (no inbox) or
        ``hybrid`` (both). The runner is a registered node; the activation is a lease
        until the runner releases it, its node ends, or ``activation_ttl`` passes."""
        runner_id = check_id(runner_id, "runner_id")
        mode = check_choice(mode, MODES, "mode")
        return self.store.assign(runner_id, mode, self.clock.now())

    def release_assignment(
        self,
        assignment_id: int,
        runner_id: str,
        epoch: int,
        outcome: dict[str, Any] | None = None,
    ) -> Agent:
        """End an activation: the agent's ``last_activated_at`` and
        ``activation_count`` are set and ``outcome`` (``posts``, ``comments``,
        ``inbox_read`` and free-form fields) is recorded against its daily caps.

        ``LeaseError`` (nothing changed; its hint names ``get_assignment``) when the
        runner does not hold it at ``epoch``: released already, expired, or another
        runner's."""
        if (
            isinstance(assignment_id, bool)
            or not isinstance(assignment_id, int)
            or not 1 <= assignment_id <= MAX_INT
        ):
            raise InvalidInputError(
                "assignment_id must be a positive integer", field="assignment_id"
            )
        if isinstance(epoch, bool) or not isinstance(epoch, int) or not 1 <= epoch <= MAX_INT:
            raise InvalidInputError("epoch must be a positive integer", field="epoch")
        try:
            return self.store.release_activation(
                assignment_id,
                check_id(runner_id, "runner_id"),
                epoch,
                _outcome(outcome),
                self.clock.now(),
            )
        except LeaseError as exc:
            raise activation_lost(exc) from None

    def list_assignments(self, limit: int = 100) -> list[Assignment]:
        """The live activations (who holds which agent, until when), oldest first."""
        return self.store.list_assignments(check_limit(limit))
