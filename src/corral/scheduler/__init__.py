"""The activation scheduler: which agent a runner activates next (inbox first, then
due cron overrides, then the stalest), activations as leases, and the runner SDK.

``policy`` is the order as pure functions; ``cron`` wraps ``cronsim``;
``agentconfig`` checks an agent's activation config.
"""

from __future__ import annotations

from corral.scheduler.policy import KINDS, MODES, Candidate, Pick, pick

__all__ = ["KINDS", "MODES", "Candidate", "Pick", "pick"]
