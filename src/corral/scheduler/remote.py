"""The scheduler's operations on the remote client that the generated ones
(``corral.remote_ops``) cannot do (mixed into ``corral.remote.HttpClient``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from corral.errors import InvalidInputError
from corral.remote_calls import RemoteCalls, build, one
from corral.scheduler.records import Agent, Assignment

if TYPE_CHECKING:
    from corral.params import Epoch, NodeId
    from corral.scheduler.ops import ModeName

__all__ = ["SchedulerRemote"]


class SchedulerRemote(RemoteCalls):
    """The activation scheduler's operations over HTTP, where the answer is wrapped
    or the argument is checked before it becomes a path."""

    def get_assignment(self, runner_id: NodeId, mode: ModeName = "hybrid") -> Assignment | None:
        d = self._invoke("get_assignment", {"runner_id": runner_id, "mode": mode})
        return None if d["assignment"] is None else one(Assignment, d["assignment"])

    def release_assignment(
        self,
        assignment_id: Epoch,
        runner_id: NodeId,
        epoch: Epoch,
        outcome: dict[str, Any] | None = None,
    ) -> Agent:
        if isinstance(assignment_id, bool) or not isinstance(assignment_id, int):
            raise InvalidInputError(
                "assignment_id must be a positive integer", field="assignment_id"
            )
        args = {
            "assignment_id": assignment_id,
            "runner_id": runner_id,
            "epoch": epoch,
            "outcome": outcome,
        }
        return build(Agent, self._invoke("release_assignment", args))
