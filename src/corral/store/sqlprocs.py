"""The supervised processes of ``SQLStore``: each host's supervisor reports its
processes (one row per host and agent), and operators' start/stop/restart requests
travel to it as events (``process_action_requested``, answered by
``process_action_done``)."""

from __future__ import annotations

from typing import Any

from corral.errors import NotFoundError
from corral.model import Event, Process
from corral.store.rows import _dumps, _loads, event_from_row
from corral.store.sqldb import Db

__all__ = [
    "ack_process_action",
    "list_processes",
    "process_actions",
    "process_from_row",
    "report_processes",
    "request_process_action",
]

REQUESTED = "process_action_requested"


def process_from_row(row: Any) -> Process:
    return Process(
        host=row["host"],
        agent=row["agent"],
        state=row["state"],
        pid=row["pid"],
        restarts=row["restarts"],
        started_at=_float(row["started_at"]),
        last_beat=_float(row["last_beat"]),
        flags=list(_loads(row["flags"]) or []),
        last_exit=_loads(row["last_exit"]),
        reported_at=float(row["reported_at"]),
    )


def _float(value: float | None) -> float | None:
    return None if value is None else float(value)


EXIT_TEXT_CHARS = 200  # of each text a process_state event carries about the last exit


def _one_line(text: str) -> str:
    """``text`` as one printable line of at most ``EXIT_TEXT_CHARS``: control
    characters (newlines, terminal escapes) become spaces."""
    return "".join(c if c.isprintable() else " " for c in text[:EXIT_TEXT_CHARS]).strip()


def _exit_summary(last_exit: dict[str, Any] | None) -> dict[str, Any]:
    """A process_state event's account of the agent's last exit, when its host
    reported one: ``exit`` (how it ended, e.g. ``exit code 1``) and ``stderr`` (the
    last non-blank line of its stderr tail, or None), so a reader of the event sees why
    an agent is restarted without looking the process up. Each is one printable line
    of at most ``EXIT_TEXT_CHARS``, whatever the host sent."""
    if not isinstance(last_exit, dict):
        return {}
    described = last_exit.get("describe")
    tail = last_exit.get("stderr_tail")
    lines = reversed(tail) if isinstance(tail, list) else ()
    said = next((one for t in lines if isinstance(t, str) and (one := _one_line(t))), None)
    exit_text = _one_line(described) if isinstance(described, str) else ""
    return {"exit": exit_text or "unknown", "stderr": said}


def report_processes(db: Db, host: str, processes: list[Process], now: float) -> list[Process]:
    with db.write() as tx:
        tx.one("lock_host_processes", host=host)  # one report of a host at a time
        old = {r["agent"]: r for r in tx.all("processes_of_host", host=host)}
        tx.run("processes_clear_host", host=host)
        stored = []
        for p in processes:
            row = tx.one(
                "process_insert",
                host=host,
                agent=p.agent,
                state=p.state,
                pid=p.pid,
                restarts=p.restarts,
                started_at=p.started_at,
                last_beat=p.last_beat,
                flags=_dumps(list(p.flags)),
                last_exit=None if p.last_exit is None else _dumps(p.last_exit),
                now=now,
            )
            before = old.pop(p.agent, None)
            if before is None or before["state"] != p.state:
                db.event(
                    tx,
                    now,
                    "process_state",
                    host=host,
                    agent=p.agent,
                    **{"from": None if before is None else before["state"]},
                    to=p.state,
                    pid=p.pid,
                    flags=list(p.flags),
                    **_exit_summary(p.last_exit),
                )
            stored.append(process_from_row(row))
        for agent, before in sorted(old.items()):
            db.event(
                tx, now, "process_removed", host=host, agent=agent, **{"from": before["state"]}
            )
        return sorted(stored, key=lambda p: p.agent)


def list_processes(db: Db, host: str | None = None) -> list[Process]:
    with db.read() as tx:
        rows = tx.all("processes_all") if host is None else tx.all("processes_of_host", host=host)
    return [process_from_row(r) for r in rows]


def request_process_action(
    db: Db, host: str, agent: str, action: str, now: float, actor: str
) -> Event:
    with db.write() as tx:
        if tx.one("process_get", host=host, agent=agent) is None:
            if not tx.all("processes_of_host", host=host):
                raise NotFoundError(f"no supervisor reports host {host}", field="host")
            raise NotFoundError(f"host {host} reports no agent {agent}", field="agent")
        row = tx.one(
            "event_insert_returning",
            ts=now,
            kind=REQUESTED,
            node_id=None,
            task_id=None,
            data=_dumps({"host": host, "agent": agent, "action": action, "actor": actor}),
        )
        return event_from_row(row)


def process_actions(db: Db, host: str, since: int, limit: int) -> list[Event]:
    with db.read_latest(single=True) as tx:
        rows = tx.all("process_actions_since", host=host, since=since, limit=limit)
    return [event_from_row(r) for r in rows]


def ack_process_action(
    db: Db, host: str, request_seq: int, ok: bool, message: str, now: float
) -> Event:
    with db.write() as tx:
        req = tx.one("event_get", seq=request_seq)
        data = _loads(req["data"]) if req is not None else {}
        if req is None or req["kind"] != REQUESTED or data.get("host") != host:
            raise NotFoundError(
                f"no process action request {request_seq} for host {host}",
                field="request_seq",
            )
        row = tx.one(
            "event_insert_returning",
            ts=now,
            kind="process_action_done",
            node_id=None,
            task_id=None,
            data=_dumps(
                {
                    "host": host,
                    "agent": data.get("agent"),
                    "action": data.get("action"),
                    "request": request_seq,
                    "ok": ok,
                    "message": message,
                    "actor": data.get("actor"),  # who asked (the supervisor only answers)
                }
            ),
        )
        return event_from_row(row)
