"""The workflow operations of the remote client that the generated ones
(``corral.remote_ops``) cannot do (mixed into ``corral.remote.HttpClient``)."""

from __future__ import annotations

from typing import Any

from corral.remote_calls import RemoteCalls
from corral.workflows.model import (
    Delivery,
    Handler,
    HandlerRun,
    WorkflowWork,
)
from corral.workflows.service import check_bool

__all__ = ["WorkflowsHttp"]


def _work(d: dict[str, Any]) -> WorkflowWork:
    return WorkflowWork(
        runs=[
            HandlerRun(
                handler=Handler.from_dict(r["handler"]),
                start=r["start"],
                checkpoint=r["checkpoint"],
                release_after=r["release_after"],
            )
            for r in d["runs"]
        ],
        deliveries=[Delivery(**x) for x in d["deliveries"]],
        release=list(d["release"]),
        now=d["now"],
    )


class WorkflowsHttp(RemoteCalls):
    """What the generated methods (``corral.remote_ops``) cannot do; needs ``request``
    (``HttpClient``'s)."""

    def run_workflow(self, workflow: str, /, **kwargs: Any) -> str:
        d = self._invoke("run_workflow", {"workflow": workflow, "kwargs": kwargs})
        return str(d["handler_id"])

    def list_handlers(
        self,
        status: str | None = None,
        idle: bool | None = None,
        idle_duration_gt: float | None = None,
        workflow: str | None = None,
        host: str | None = None,
        limit: int = 100,
    ) -> list[Handler]:
        query = {
            "status": status,
            "idle": None if idle is None else str(check_bool(idle, "idle")).lower(),
            "idle_duration_gt": idle_duration_gt,
            "workflow": workflow,
            "host": host,
            "limit": limit,
        }
        return [Handler.from_dict(h) for h in self._invoke("list_handlers", query)]

    def take_workflow_work(self, host: str, limit: int = 100) -> WorkflowWork:
        return _work(self._invoke("take_workflow_work", {"host": host, "limit": limit}))
