"""The workflow operations of the remote client (mixed into
``corral.remote.HttpClient``): each calls its route in ``corral.operations``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from corral.operations import operation
from corral.validation import check_id
from corral.workflows.model import (
    Delivery,
    Handler,
    HandlerRun,
    WorkflowHost,
    WorkflowWork,
)
from corral.workflows.service import check_bool

__all__ = ["WorkflowsHttp"]


def _seg(value: Any, field: str) -> str:
    """An id as one path segment (checked, quoted)."""
    return quote(check_id(value, field), safe="").replace(".", "%2E")


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


class WorkflowsHttp:
    """Needs ``request`` (``HttpClient``'s)."""

    if TYPE_CHECKING:

        def request(
            self,
            method: str,
            path: str,
            body: Any = None,
            *,
            query: dict[str, Any] | None = None,
            raw: bool = False,
            timeout: float | None = None,
            body_field: str | None = None,
        ) -> Any: ...

    def _wf(self, name: str, body: Any = None, query: Any = None, **path: str) -> Any:
        op = operation(name)
        target = op.path
        for key, seg in path.items():
            target = target.replace(f"{{{key}}}", seg)
        if op.method == "GET":
            return self.request(op.method, target, query=query)
        return self.request(op.method, target, body)

    def run_workflow(self, workflow: str, /, **kwargs: Any) -> str:
        d = self._wf("run_workflow", {"kwargs": kwargs}, workflow=_seg(workflow, "workflow"))
        return str(d["handler_id"])

    def get_handler(self, handler_id: str) -> Handler:
        return Handler.from_dict(self._wf("get_handler", handler_id=_seg(handler_id, "handler_id")))

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
        return [Handler.from_dict(h) for h in self._wf("list_handlers", query=query)]

    def send_event(
        self, handler_id: str, event_type: str, data: dict[str, Any] | None = None
    ) -> Handler:
        body = {"event_type": event_type, "data": data}
        return Handler.from_dict(
            self._wf("send_event", body, handler_id=_seg(handler_id, "handler_id"))
        )

    def serve_workflows(self, host: str, workflows: list[dict[str, Any]]) -> list[WorkflowHost]:
        d = self._wf("serve_workflows", {"workflows": workflows}, host=_seg(host, "host"))
        return [WorkflowHost(**w) for w in d]

    def take_workflow_work(self, host: str, limit: int = 100) -> WorkflowWork:
        return _work(self._wf("take_workflow_work", {"limit": limit}, host=_seg(host, "host")))

    def report_handler(
        self,
        host: str,
        handler_id: str,
        state: str,
        waiters: list[dict[str, Any]] | None = None,
        result: Any = None,
        error: str | None = None,
        reason: str | None = None,
    ) -> Handler:
        body = {
            "host": host,
            "state": state,
            "waiters": waiters,
            "result": result,
            "error": error,
            "reason": reason,
        }
        return Handler.from_dict(
            self._wf("report_handler", body, handler_id=_seg(handler_id, "handler_id"))
        )

    def report_steps(self, host: str, handler_id: str, steps: dict[str, Any]) -> Handler:
        body = {"host": host, "steps": steps}
        return Handler.from_dict(
            self._wf("report_steps", body, handler_id=_seg(handler_id, "handler_id"))
        )

    def release_handler(self, host: str, handler_id: str, checkpoint: dict[str, Any]) -> Handler:
        body = {"host": host, "checkpoint": checkpoint}
        return Handler.from_dict(
            self._wf("release_handler", body, handler_id=_seg(handler_id, "handler_id"))
        )
