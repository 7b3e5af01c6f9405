"""corral's process supervisor.

- :mod:`corral.supervisor.manifest`: the manifest (TOML, or the JSON agents file),
  validated, and the dependency order of its agents.
- :mod:`corral.supervisor.policy`: pure decisions (state machine, restart policies,
  backoff and restart limit, timeouts, deadlines, the ``HEARTBEAT`` line).
- :mod:`corral.supervisor.logs`: per-agent log files rotated without losing a line
  (not re-exported here so that ``python -m corral.supervisor.logs`` runs cleanly).
- :mod:`corral.supervisor.logd`: the log daemon that reads every child's output pipes
  and outlives the supervisor (``ensure_logd``, ``LogdClient``; not re-exported
  either, for ``python -m corral.supervisor.logd``).
- :mod:`corral.supervisor.supervisor`: the daemon (``Supervisor``), with
  :mod:`~corral.supervisor.output` (its side of the log daemon),
  :mod:`~corral.supervisor.adopt` (re-attaching after a crash) and
  :mod:`~corral.supervisor.link` (the cluster).
"""

from __future__ import annotations

from corral.supervisor.manifest import (
    AgentSpec,
    Manifest,
    ManifestError,
    Settings,
    load_manifest,
    phases,
    stop_phases,
)
from corral.supervisor.policy import Beat, Decision, Exit, RestartTracker, State, parse_heartbeat

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
