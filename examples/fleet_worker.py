"""The fleet example's worker: a corral SDK worker run by a pool.

Its node id and role come from the pool (``CORRAL_AGENT_ID``, ``CORRAL_ROLE``), its
cluster and node token from the supervisor (``CORRAL_URL``, ``CORRAL_TOKEN``). It
claims, works (a short sleep here), completes, and once the board is empty retires
itself after the cluster's ``idle_timeout_seconds``. SIGTERM hands its task back.
While the relay it depends on restarts it gets SIGUSR1 and pauses until SIGUSR2.
"""

import os
import signal
import sys
import threading
import time

import corral

resumed = threading.Event()
resumed.set()
signal.signal(signal.SIGUSR1, lambda *_: resumed.clear())
signal.signal(signal.SIGUSR2, lambda *_: resumed.set())
WORK_SECONDS = float(os.environ.get("FLEET_WORK_SECONDS", "0.6"))


def handle(task: corral.Task) -> dict:
    resumed.wait()  # the relay is back
    time.sleep(WORK_SECONDS)  # the work
    return {"done_by": os.environ["CORRAL_AGENT_ID"], "words": len(task.title.split())}


worker = corral.Worker(
    os.environ["CORRAL_AGENT_ID"],
    os.environ.get("CORRAL_ROLE", "developer"),
    heartbeat_interval=1.0,
)
sys.exit(worker.run(handle))
