"""corral's process supervisor.

- :mod:`corral.supervisor.manifest`: the manifest (TOML, or the JSON agents file),
  validated, and the dependency order of its agents.
- :mod:`corral.supervisor.policy`: pure decisions (state machine, restart policies,
  backoff and restart limit, timeouts, deadlines, the ``HEARTBEAT`` line).
- :mod:`corral.supervisor.logs`: per-agent log files rotated without losing a line.
- :mod:`corral.supervisor.logd`: the log daemon that reads every child's output pipes
  and outlives the supervisor (``ensure_logd``, ``LogdClient``), its loop in
  :mod:`~corral.supervisor.logd_server`.
- :mod:`corral.supervisor.supervisor`: the daemon (``Supervisor``), with
  :mod:`~corral.supervisor.output` (its side of the log daemon),
  :mod:`~corral.supervisor.adopt` (re-attaching after a crash) and
  :mod:`~corral.supervisor.link` (the cluster).

The names below are loaded on first use (PEP 562), not when the package is
imported: the log daemon imports this package and must not pay for the manifest's
and the policies' imports (``tomllib``, ``dataclasses``, ``random``...), and
``python -m corral.supervisor.logs`` / ``.logd`` run cleanly.
"""

from __future__ import annotations

import importlib

TYPE_CHECKING = False  # not typing's: the log daemon does not load typing
if TYPE_CHECKING:  # seen as the real names by a checker, loaded lazily at run time
    from corral.supervisor.manifest import (
        AgentSpec,
        Manifest,
        ManifestError,
        Settings,
        load_manifest,
        phases,
        stop_phases,
    )
    from corral.supervisor.policy import (
        Beat,
        Decision,
        Exit,
        RestartTracker,
        State,
        parse_heartbeat,
    )

__all__ = [
    "AgentSpec",
    "Beat",
    "Decision",
    "Exit",
    "Manifest",
    "ManifestError",
    "RestartTracker",
    "Settings",
    "State",
    "load_manifest",
    "parse_heartbeat",
    "phases",
    "stop_phases",
]

_MANIFEST = (
    "AgentSpec",
    "Manifest",
    "ManifestError",
    "Settings",
    "load_manifest",
    "phases",
    "stop_phases",
)
_LAZY = {name: "corral.supervisor.manifest" for name in _MANIFEST} | {
    name: "corral.supervisor.policy" for name in __all__ if name not in _MANIFEST
}


def __getattr__(name: str) -> object:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value  # looked up once
        return value
    raise AttributeError(f"module 'corral.supervisor' has no attribute {name!r}")
