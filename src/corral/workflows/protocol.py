"""The workflow operations every corral client offers (part of ``corral.types.Client``)."""

from __future__ import annotations

from typing import Any, Protocol

from corral.workflows.model import Handler, WorkflowHost, WorkflowWork

__all__ = ["WorkflowClient"]


class WorkflowClient(Protocol):
    def run_workflow(self, workflow: str, /, **kwargs: Any) -> str: ...

    def get_handler(self, handler_id: str) -> Handler: ...

    def list_handlers(
        self,
        status: str | None = None,
        idle: bool | None = None,
        idle_duration_gt: float | None = None,
        workflow: str | None = None,
        host: str | None = None,
        limit: int = 100,
    ) -> list[Handler]: ...

    def send_event(
        self, handler_id: str, event_type: str, data: dict[str, Any] | None = None
    ) -> Handler: ...

    def serve_workflows(self, host: str, workflows: list[dict[str, Any]]) -> list[WorkflowHost]: ...

    def take_workflow_work(self, host: str, limit: int = 100) -> WorkflowWork: ...

    def report_handler(
        self,
        host: str,
        handler_id: str,
        state: str,
        waiters: list[dict[str, Any]] | None = None,
        result: Any = None,
        error: str | None = None,
        reason: str | None = None,
    ) -> Handler: ...

    def report_steps(self, host: str, handler_id: str, steps: dict[str, Any]) -> Handler: ...

    def release_handler(
        self, host: str, handler_id: str, checkpoint: dict[str, Any]
    ) -> Handler: ...
