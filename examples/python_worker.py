"""A corral worker in a few lines: claim, handle, complete; idle, retire; SIGTERM-safe.

CORRAL_URL=sqlite:///.corral/corral.db python examples/python_worker.py W1
"""

import sys

import corral


def handle(task: corral.Task) -> dict:
    print(f"working on task {task.id}: {task.title}", flush=True)
    return {"words": len(task.description.split())}  # stored as the task's result


worker = corral.Worker(sys.argv[1] if len(sys.argv) > 1 else "py-worker-1", "developer")
sys.exit(worker.run(handle))
