"""The scheduler's operations on the remote client (mixed into
``corral.remote.HttpClient``): each calls its route of ``corral.operations``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from corral.operations import operation
from corral.scheduler.records import Agent, Assignment, Notification
from corral.validation import check_id

__all__ = ["SchedulerRemote", "agent_from", "assignment_from", "notification_from"]


def agent_from(d: dict[str, Any]) -> Agent:
    names = Agent.__dataclass_fields__
    return Agent(**{k: v for k, v in d.items() if k in names})


def notification_from(d: dict[str, Any]) -> Notification:
    names = Notification.__dataclass_fields__
    return Notification(**{k: v for k, v in d.items() if k in names})


def assignment_from(d: dict[str, Any]) -> Assignment:
    names = Assignment.__dataclass_fields__
    out = {k: v for k, v in d.items() if k in names}
    out["inbox"] = [notification_from(n) for n in d.get("inbox", ())]
    return Assignment(**out)


def _seg(value: Any, field: str) -> str:
    return quote(check_id(value, field), safe="").replace(".", "%2E")


class SchedulerRemote:
    """The activation scheduler's operations over HTTP."""

    if TYPE_CHECKING:

        def request(
            self,
            method: str,
            path: str,
            body: Any = None,
            *,
            query: dict[str, Any] | None = None,
        ) -> Any: ...

    def _sched(self, name: str, body: Any = None, **path: str) -> Any:
        op = operation(name)
        route = op.path
        for key, value in path.items():
            route = route.replace(f"{{{key}}}", value)
        if op.method == "GET":
            return self.request(op.method, route, query=body)
        return self.request(op.method, route, body)

    def add_agent(self, agent_id: str, config: dict[str, Any] | None = None) -> Agent:
        return agent_from(self._sched("add_agent", {"agent_id": agent_id, "config": config}))

    def get_agent(self, agent_id: str) -> Agent:
        return agent_from(self._sched("get_agent", agent_id=_seg(agent_id, "agent_id")))

    def list_agents(self, after: str = "", limit: int = 100) -> list[Agent]:
        rows = self._sched("list_agents", {"after": after, "limit": limit})
        return [agent_from(r) for r in rows]

    def notify(self, agent_id: str, payload: Any) -> Notification:
        d = self._sched("notify", {"payload": payload}, agent_id=_seg(agent_id, "agent_id"))
        return notification_from(d)

    def read_inbox(self, agent_id: str, limit: int = 100) -> list[Notification]:
        rows = self._sched("read_inbox", {"limit": limit}, agent_id=_seg(agent_id, "agent_id"))
        return [notification_from(r) for r in rows]

    def get_assignment(self, runner_id: str, mode: str = "hybrid") -> Assignment | None:
        d = self._sched("get_assignment", {"mode": mode}, runner_id=_seg(runner_id, "runner_id"))
        return None if d["assignment"] is None else assignment_from(d["assignment"])

    def release_assignment(
        self,
        assignment_id: int,
        runner_id: str,
        epoch: int,
        outcome: dict[str, Any] | None = None,
    ) -> Agent:
        from corral.errors import InvalidInputError

        if (
            isinstance(assignment_id, bool)
            or not isinstance(assignment_id, int)
            or not (1 <= assignment_id < 10**18)
        ):
            raise InvalidInputError(
                "assignment_id must be a positive integer", field="assignment_id"
            )
        body = {"runner_id": runner_id, "epoch": epoch, "outcome": outcome}
        return agent_from(self._sched("release_assignment", body, assignment_id=str(assignment_id)))

    def list_assignments(self, limit: int = 100) -> list[Assignment]:
        return [assignment_from(r) for r in self._sched("list_assignments", {"limit": limit})]
