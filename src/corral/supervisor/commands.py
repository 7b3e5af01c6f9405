"""The control commands: every command of the control socket, declared once.

A command is an async handler below: its name, its parameters after the supervisor
(each typed: ``str``, ``int`` or ``bool``; one without a default is required), its
docstring (the command's help, shown by ``corral ctl COMMAND --help``) and the
``Supervisor`` method it calls. :func:`dispatcher` turns a supervisor into the
``dispatch(command, args)`` coroutine the control server (``corral.supervisor.control``)
calls; it refuses an unknown command, an unknown or missing argument and an argument of
the wrong type with an ``InvalidInputError`` naming it, before the supervisor is
touched. An agent id the supervisor does not know is a ``NotFoundError``.

``corral ctl`` builds one subcommand per entry of :data:`COMMANDS` from this table,
plus the commands of :data:`CLIENT_COMMANDS`, which the CLI carries out itself (``logs``
reads the agent's log files directly, so it also works while no supervisor runs).
``tests/integration/test_supervisor_control.py`` checks that ``corral ctl`` offers exactly these.

Adding a command: write the handler with ``@command("name", "supervisor_method")`` and
its docstring; ``corral ctl`` gains the subcommand (give it a text form in
``corral.cli.supervise`` if the default one does not fit).
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from corral.errors import InvalidInputError, NotFoundError

__all__ = [
    "CLIENT_COMMANDS",
    "COMMANDS",
    "Arg",
    "Command",
    "SupervisorLike",
    "command",
    "dispatcher",
    "get_command",
]


class SupervisorLike(Protocol):
    """What the commands use of ``corral.supervisor.supervisor.Supervisor``."""

    def status(self) -> list[dict[str, Any]]: ...
    async def start(self, agent_id: str) -> Any: ...
    async def stop(self, agent_id: str) -> Any: ...
    async def restart(self, agent_id: str) -> Any: ...
    async def shutdown(self) -> Any: ...
    def reopen_logs(self) -> Any: ...


_TYPES: Mapping[str, type] = {"str": str, "int": int, "bool": bool}


@dataclass(frozen=True, slots=True)
class Arg:
    """One argument of a command: its JSON type and whether it must be given."""

    name: str
    type: type
    required: bool = True
    default: Any = None

    def check(self, value: Any) -> Any:
        ok = isinstance(value, self.type) and (self.type is bool or not isinstance(value, bool))
        if not ok:
            raise InvalidInputError(f"must be a {self.type.__name__}", field=self.name)
        if self.type is str and (not value or "\x00" in value):
            raise InvalidInputError("must be a non-empty string", field=self.name)
        return value


Handler = Callable[..., Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class Command:
    """One control command: ``handler(supervisor, **args)`` calls ``method``."""

    name: str
    method: str  # the Supervisor method the handler calls
    args: tuple[Arg, ...]
    handler: Handler

    @property
    def doc(self) -> str:
        """The handler's docstring: the command's help."""
        return inspect.getdoc(self.handler) or ""

    @property
    def summary(self) -> str:
        """The docstring's first line."""
        return self.doc.split("\n", 1)[0]

    def validate(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """``args`` checked strictly: no unknown name, every required one, each of its
        type (``InvalidInputError`` naming the argument)."""
        known = {a.name for a in self.args}
        for name in args:
            if name not in known:
                raise InvalidInputError(f"unknown argument for {self.name}", field=name)
        out: dict[str, Any] = {}
        for a in self.args:
            if a.name in args:
                out[a.name] = a.check(args[a.name])
            elif a.required:
                raise InvalidInputError(f"{self.name} needs {a.name}", field=a.name)
            else:
                out[a.name] = a.default
        return out


_REGISTRY: dict[str, Command] = {}


def command(name: str, method: str) -> Callable[[Handler], Handler]:
    """Declare ``handler`` as the control command ``name``, calling ``Supervisor.method``."""

    def register(handler: Handler) -> Handler:
        params = list(inspect.signature(handler).parameters.values())[1:]  # after sup
        args = []
        for p in params:
            ann = p.annotation if isinstance(p.annotation, str) else p.annotation.__name__
            required = p.default is inspect.Parameter.empty
            args.append(Arg(p.name, _TYPES[ann], required, None if required else p.default))
        _REGISTRY[name] = Command(name, method, tuple(args), handler)
        return handler

    return register


async def _maybe_await(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


def _row(sup: SupervisorLike, agent_id: str) -> dict[str, Any]:
    for row in sup.status():
        if row.get("agent") == agent_id:
            return row
    raise NotFoundError(f"no agent {agent_id} in the manifest", field="id")


# ---- the commands -------------------------------------------------------------------


@command("status", "status")
async def _status(sup: SupervisorLike) -> list[dict[str, Any]]:
    """Every agent: state, pid, last beat, uptime, restarts, flags, last exit.

    One object per agent, in manifest order, with at least agent, state, pid,
    restarts, uptime (seconds), last_beat (unix time), flags (such as
    restart-exhausted) and last_exit.
    """
    return list(await _maybe_await(sup.status()))


@command("start", "start")
async def _start(sup: SupervisorLike, id: str) -> dict[str, Any]:
    """Start a stopped agent (clears restart-exhausted and the backoff).

    An agent stopped by the operator or exhausted stays STOPPED until this command.
    Answers with the agent's status once it is spawned.
    """
    _row(sup, id)
    await _maybe_await(sup.start(id))
    return _row(sup, id)


@command("stop", "stop")
async def _stop(sup: SupervisorLike, id: str) -> dict[str, Any]:
    """Stop an agent gracefully; it stays STOPPED until started.

    Sends its stop_signal to the agent's process group, waits its stop_timeout, then
    SIGKILLs the group. Answers once the process is gone.
    """
    _row(sup, id)
    await _maybe_await(sup.stop(id))
    return _row(sup, id)


@command("restart", "restart")
async def _restart(sup: SupervisorLike, id: str) -> dict[str, Any]:
    """Stop an agent gracefully and start it again.

    Its dependents go WAITING (SIGUSR1) until it is RUNNING again (SIGUSR2).
    """
    _row(sup, id)
    await _maybe_await(sup.restart(id))
    return _row(sup, id)


@command("reopen", "reopen_logs")
async def _reopen(sup: SupervisorLike) -> dict[str, Any]:
    """Reopen every log file (after an outside tool moved them)."""
    await _maybe_await(sup.reopen_logs())
    return {"reopened": True}


@command("shutdown", "shutdown")
async def _shutdown(sup: SupervisorLike) -> dict[str, Any]:
    """Stop every agent in reverse dependency order, then the supervisor.

    Answers once every agent is stopped.
    """
    await _maybe_await(sup.shutdown())
    return {"shutdown": True}


def _pools(sup: SupervisorLike, method: str) -> Any:
    found = getattr(sup, method, None)
    if found is None:
        raise InvalidInputError(
            "this supervisor runs no pools (spawn requests are corral up's)", field="command"
        )
    return found


@command("requests", "spawn_requests")
async def _requests(sup: SupervisorLike) -> list[dict[str, Any]]:
    """The spawn requests of corral up's pools in ask mode, oldest first.

    One object per request with id, pool, role, status (pending, accepted,
    declined or withdrawn), reason (why its pool asked), decided_by and member
    (the agent an accepted one became).
    """
    return list(await _maybe_await(_pools(sup, "spawn_requests")()))


@command("accept", "accept_request")
async def _accept(sup: SupervisorLike, id: int) -> dict[str, Any]:
    """Accept a pending spawn request: its pool starts one member for it."""
    return dict(await _maybe_await(_pools(sup, "accept_request")(id)))


@command("decline", "decline_request")
async def _decline(sup: SupervisorLike, id: int) -> dict[str, Any]:
    """Decline a pending spawn request: nothing is started for it."""
    return dict(await _maybe_await(_pools(sup, "decline_request")(id)))


COMMANDS: tuple[Command, ...] = tuple(_REGISTRY.values())
"""Every command the control socket answers, in ``corral ctl --help`` order."""

CLIENT_COMMANDS: Mapping[str, str] = {
    "logs": "reads logs/<agent>/stdout.log (or stderr.log) itself and follows rotation, "
    "so it needs no supervisor and streams nothing over the socket",
}
"""``corral ctl`` commands carried out by the CLI alone, each with the reason."""


def get_command(name: str) -> Command:
    """The command called ``name`` (``InvalidInputError`` naming ``command`` if none)."""
    try:
        return _REGISTRY[name]
    except KeyError:
        choices = ", ".join(_REGISTRY)
        raise InvalidInputError(
            f"unknown command {name!r} (one of {choices})", field="command"
        ) from None


def dispatcher(sup: SupervisorLike) -> Callable[[str, dict[str, Any]], Awaitable[Any]]:
    """The ``dispatch(command, args)`` of a control server for ``sup``."""

    async def dispatch(name: str, args: dict[str, Any]) -> Any:
        cmd = get_command(name)
        return await cmd.handler(sup, **cmd.validate(args))

    return dispatch
