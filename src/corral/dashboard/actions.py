"""The panels' actions. The Tasks panel's: **Cancel** and **Requeue** on the tasks a
page selected, or on every task its task filter matches (a dry run's count first, then
the action once confirmed). The other panels' (``PanelActions``): **Start**, **Stop**
and **Restart** of a supervised process (``request_process_action``), **Accept** and
**Decline** of a spawn request (``accept_spawn_request``, ``decline_spawn_request``),
**Send event** to a workflow run (``send_event``), **Release** of an idle run and
**Resume** of a released one (``release_workflow``, ``resume_workflow``).

Each button calls an operation, as the session's caller (its ``actor`` is what the
events record): ``cancel_task`` and ``requeue_task`` for each selected task,
``cancel_tasks`` and ``requeue_tasks`` for the filter. Nothing is decided here: the
operations check every argument (their refusals are shown as they word them) and
choose the tasks. The answer is a fragment for the panel's action area.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from jinja2 import Environment
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from corral.dashboard.views import (
    PROCESS_ACTIONS,
    SPAWN_ACTIONS,
    TASK_ARGUMENTS,
    TASK_FILTERS,
    Filters,
)
from corral.errors import CorralError, InvalidInputError

if TYPE_CHECKING:
    from corral.cluster import Cluster
    from corral.dashboard.session import Session
    from corral.server.app import ServerState

__all__ = ["ACTIONS", "RUN_ACTIONS", "PanelActions", "TaskActions", "matching"]

ACTIONS = {"cancel": ("cancelled", "Cancel"), "requeue": ("requeued", "Requeue")}
RUN_ACTIONS = ("release", "resume")  # the Workflows panel's buttons on a run
_MAX_SELECTED = 300  # the tasks the panel lists: 100 each of pending, in progress, failed


def matching(f: Filters) -> dict[str, Any]:
    """The bulk operation's arguments for the page's task filter (those set)."""
    out: dict[str, Any] = {}
    for name in TASK_FILTERS:
        value = getattr(f, f"task_{name}")
        if not value:
            continue
        if name == "min_age":
            try:
                out["min_age"] = float(value)
            except ValueError:
                raise InvalidInputError(
                    f"min_age must be a number of seconds; got {value!r:.40}", field="min_age"
                ) from None
        else:
            out[TASK_ARGUMENTS[name]] = value
    return out


class TaskActions:
    """The action endpoint's work over a server's cluster."""

    def __init__(self, st: ServerState, env: Environment) -> None:
        self.st = st
        self.env = env

    @property
    def cluster(self) -> Cluster:
        cluster: Cluster = self.st.cluster
        return cluster

    def _answer(self, status: int = 200, **context: Any) -> Response:
        html = self.env.get_template("task_action.html").render(**context)
        return HTMLResponse(html, status)

    async def act(self, request: Request, session: Session) -> Response:
        """``POST /dashboard/tasks/act``: ``action`` (cancel or requeue), ``scope``
        (``selected``: the ``task_id`` fields; ``matching``: the task filter's
        fields, a dry run unless ``confirm`` is 1) and ``reason`` (a cancel's)."""
        form = await request.form(max_files=0, max_fields=_MAX_SELECTED + 20)
        fields = {k: v for k, v in form.items() if isinstance(v, str)}
        action, scope = fields.get("action", ""), fields.get("scope", "")
        if action not in ACTIONS or scope not in ("selected", "matching"):
            return self._answer(422, error="Unknown action: use the panel's buttons.")
        reason = fields.get("reason", "")
        actor = session.principal.actor
        try:
            if scope == "selected":
                ids = [v for v in form.getlist("task_id") if isinstance(v, str)]
                if not ids:
                    return self._answer(422, error="Select tasks first: tick their boxes below.")
                done, refused = await self.st.run(self._each, action, ids, reason, actor)
                self.st.notify()
                return self._answer(action=action, done=done, refused=refused, words=ACTIONS)
            filters = Filters.from_query(fields)
            confirm = fields.get("confirm") == "1"
            args = {**matching(filters), "dry_run": not confirm, "actor": actor}
            if action == "cancel":
                args["reason"] = reason
            call = getattr(self.cluster, f"{action}_tasks")
            batch = await self.st.run(functools.partial(call, **args))
        except InvalidInputError as exc:
            return self._answer(422, error=exc.message)
        if confirm:
            self.st.notify()
        return self._answer(
            action=action,
            batch=batch,
            words=ACTIONS,
            reason=reason,
            filters=filters.pairs(),
        )

    def _each(
        self, action: str, ids: list[str], reason: str, actor: str
    ) -> tuple[list[int], list[tuple[str, str]]]:
        """``cancel_task`` or ``requeue_task`` on each selected task: those done, and
        each refusal with its message (one task's refusal does not stop the rest)."""
        done: list[int] = []
        refused: list[tuple[str, str]] = []
        for task_id in ids:
            try:
                if action == "cancel":
                    task = self.cluster.cancel_task(task_id, reason, actor=actor)
                else:
                    task = self.cluster.requeue_task(task_id, actor=actor)
            except CorralError as exc:
                refused.append((task_id, exc.message))
            else:
                done.append(task.id)
        return done, refused


class PanelActions:
    """The buttons of the Processes, Pools and Workflows panels, each one operation
    called as the session's caller; the answer is a line for the panel's action area
    (an operation's refusal shown as it words it, 422)."""

    def __init__(self, st: ServerState, env: Environment) -> None:
        self.st = st
        self.env = env

    def _answer(self, message: str, status: int = 200) -> Response:
        html = self.env.get_template("panel_action.html").render(message=message, ok=status < 400)
        return HTMLResponse(html, status)

    async def _fields(self, request: Request) -> dict[str, str]:
        form = await request.form(max_files=0, max_fields=20)
        return {k: v for k, v in form.items() if isinstance(v, str)}

    async def _call(self, call: Callable[[], Any]) -> tuple[Any, str | None]:
        try:
            result = await self.st.run(call)
        except CorralError as exc:
            return None, exc.message
        self.st.notify()
        return result, None

    async def process(self, request: Request, session: Session) -> Response:
        """``POST /dashboard/processes/act``: ``host``, ``agent`` and ``action``
        (start, stop or restart): ``request_process_action`` as the session's caller;
        the host's supervisor runs it at its next look (about a second)."""
        fields = await self._fields(request)
        action = fields.get("action", "")
        if action not in PROCESS_ACTIONS:
            return self._answer("Unknown action: use the panel's buttons.", 422)
        host, agent = fields.get("host", ""), fields.get("agent", "")
        cluster = self.st.cluster
        actor = session.principal.actor
        event, error = await self._call(
            functools.partial(cluster.request_process_action, host, agent, action, actor=actor)
        )
        if error is not None:
            return self._answer(error, 422)
        return self._answer(
            f"Asked {host} to {action} {agent} (request {event.seq}); its supervisor runs it"
            " within a second."
        )

    async def spawn(self, request: Request, session: Session) -> Response:
        """``POST /dashboard/spawn/act``: ``request_id`` and ``action`` (accept or
        decline): ``accept_spawn_request`` or ``decline_spawn_request`` as the
        session's caller."""
        fields = await self._fields(request)
        action = fields.get("action", "")
        if action not in SPAWN_ACTIONS:
            return self._answer("Unknown action: use the panel's buttons.", 422)
        call = getattr(self.st.cluster, f"{action}_spawn_request")
        actor = session.principal.actor
        found, error = await self._call(
            functools.partial(call, fields.get("request_id", ""), actor=actor)
        )
        if error is not None:
            return self._answer(error, 422)
        return self._answer(f"{found.text[0].upper()}{found.text[1:]}.")

    async def workflow(self, request: Request, session: Session) -> Response:
        """``POST /dashboard/workflows/act``: ``handler_id`` and ``action``: ``send``
        (the default) with ``event_type`` and ``data`` (a JSON object, "" none):
        ``send_event`` (a released run is resumed first, on a host serving its
        workflow); ``release`` or ``resume``: ``release_workflow`` or
        ``resume_workflow`` as the session's caller."""
        fields = await self._fields(request)
        action = fields.get("action", "send")
        if action in RUN_ACTIONS:
            return await self._run_action(action, fields.get("handler_id", ""), session)
        if action != "send":
            return self._answer("Unknown action: use the panel's buttons.", 422)
        raw = fields.get("data", "").strip()
        data: Any = None
        if raw:
            try:
                data = json.loads(raw)
            except ValueError:
                return self._answer('data must be a JSON object, such as {"answer": 42}.', 422)
        handler_id = fields.get("handler_id", "")
        call = functools.partial(
            self.st.cluster.send_event, handler_id, fields.get("event_type", ""), data
        )
        run, error = await self._call(call)
        if error is not None:
            return self._answer(error, 422)
        return self._answer(f"Sent {fields.get('event_type')} to {handler_id}: now {run.status}.")

    async def _run_action(self, action: str, handler_id: str, session: Session) -> Response:
        """**Release** or **Resume** of one run, as the session's caller."""
        call = getattr(self.st.cluster, f"{action}_workflow")
        actor = session.principal.actor
        run, error = await self._call(functools.partial(call, handler_id, actor=actor))
        if error is not None:
            return self._answer(error, 422)
        if action == "release":
            return self._answer(
                f"Asked {run.host} to release {handler_id}: it lets the run go at its next poll."
            )
        return self._answer(
            f"Resumed {handler_id}: a host serving {run.workflow} restores it at its next poll."
        )
