"""What a long-running command prints while it works: ``corral supervise``, ``corral
runner`` and ``corral workflows serve`` print one timestamped line on stderr per thing
they do (a state change, an activation, a workflow run's step), as ``corral up``
prints its fleet's events::

    05:33:57 corral-runner runner-1: activation 4: persona (inbox, 2 item(s))
    05:33:58 corral-runner runner-1: activation 4 released in 1.02 s: {"posts": 1}

``quiet`` keeps the warnings only; ``as_json`` prints one JSON object per line for
machines (``ts``, ``level``, ``action``, ``text`` and the record's ``fields``).

Library code logs with stdlib logging, a stable ``action`` and its ``fields`` in
``extra`` (``log.info("...", extra={"action": "activation_released", "fields":
{...}})``); this module only renders. Stdlib only: the supervisor's lean process
(``corral.supervisor.boot``) imports it too.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import IO, Any

__all__ = ["JsonFormatter", "LineFormatter", "configure", "event", "state_line"]

_MARK = "_corral_daemonlog"  # on the handlers configure installs


def event(action: str, **fields: Any) -> dict[str, Any]:
    """The ``extra`` of a log call: its stable ``action`` and its ``fields``."""
    return {"action": action, "fields": fields}


class LineFormatter(logging.Formatter):
    """``HH:MM:SS PREFIX: message`` (local time, as ``corral up``'s lines)."""

    def __init__(self, prefix: str) -> None:
        super().__init__()
        self.prefix = prefix

    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%H:%M:%S", time.localtime(record.created))
        text = record.getMessage()
        if record.levelno >= logging.WARNING:
            text = f"{record.levelname.lower()}: {text}"
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return f"{stamp} {self.prefix}: {text}"


class JsonFormatter(logging.Formatter):
    """One JSON object per record: ``ts``, ``level``, ``action``, ``text`` and the
    record's ``fields``."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": record.created,
            "level": record.levelname.lower(),
            "action": getattr(record, "action", None),
            "text": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            out.update({k: v for k, v in fields.items() if k not in out})
        if record.exc_info:
            out["error"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str, ensure_ascii=False)


def configure(
    prefix: str,
    *,
    quiet: bool = False,
    as_json: bool = False,
    stream: IO[str] | None = None,
    loggers: tuple[str, ...] = ("corral",),
) -> logging.Handler:
    """Render ``loggers`` (INFO, or WARNING when ``quiet``) on ``stream`` (stderr);
    the handler. The root logger is left alone (other libraries' warnings reach
    stderr as they would); a second call replaces the first one's handler."""
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JsonFormatter() if as_json else LineFormatter(prefix))
    setattr(handler, _MARK, True)
    for name in loggers:
        logger = logging.getLogger(name)
        logger.handlers[:] = [h for h in logger.handlers if not getattr(h, _MARK, False)]
        logger.addHandler(handler)
        logger.propagate = False
        logger.setLevel(logging.WARNING if quiet else logging.INFO)
    return handler


# ---- corral supervise: its state changes, as lines ------------------------------------


def state_line(rec: dict[str, Any]) -> tuple[int, str]:
    """(level, text) of one ``state.log`` record (``corral supervise`` logs each as
    the supervisor records it): ``relay: STARTING -> RUNNING (heartbeat; pid 4242)``;
    a warning for UNHEALTHY or a restart budget spent."""
    why = [str(rec["reason"])] if rec.get("reason") else []
    if rec.get("pid"):
        why.append(f"pid {rec['pid']}")
    old = rec.get("from") or "-"
    text = f"{rec.get('agent')}: {old} -> {rec.get('to')}" + (f" ({'; '.join(why)})" if why else "")
    bad = rec.get("to") == "UNHEALTHY" or "exhausted" in str(rec.get("reason", ""))
    return (logging.WARNING if bad else logging.INFO), text
