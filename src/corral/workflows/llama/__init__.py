"""A corral host for LlamaIndex workflows (``llama-index-workflows`` 2.26, the
``corral[llama]`` extra): runs ``Workflow`` instances for the cluster, reports each
run's idle state from the package's own ``WorkflowIdleEvent``, releases idle runs
(checkpoint in the cluster's store, then stop) and resumes them on events sent
through the cluster, re-arming ``wait_for_event`` deadlines."""

from __future__ import annotations

from corral.workflows.llama.host import LlamaHost, Served

__all__ = ["LlamaHost", "Served"]
