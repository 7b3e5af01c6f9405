"""Workflow runs that only wait on the outside world: tracked, released and resumed.

The core (``corral.workflows.idle``, the store's handler tables and the cluster's
handler operations) knows no workflow library; ``corral.workflows.llama`` hosts
LlamaIndex workflows (the ``corral[llama]`` extra)."""

from __future__ import annotations

from corral.workflows.idle import RunState, StepState, Waiter, is_idle

__all__ = ["RunState", "StepState", "Waiter", "is_idle"]
