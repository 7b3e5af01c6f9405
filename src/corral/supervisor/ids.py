"""The agent id rule, shared by the manifest and the log daemon.

Kept apart from :mod:`corral.supervisor.manifest` so that the log daemon, which
checks the agent named in each ``attach``, imports neither the manifest nor what it
needs (``tomllib``, ``dataclasses``...): logd stays a small process.
"""

from __future__ import annotations

import re

__all__ = ["AGENT_ID", "RESERVED_IDS"]

AGENT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
RESERVED_IDS = frozenset({"supervisor"})  # logs/supervisor/ is the supervisor's own
