"""The fleet example's infrastructure agent: it would relay messages; here it only
proves it lives with a ``HEARTBEAT <unix time> <status>`` line on stdout every
second (the supervisor's pipe heartbeat). The workers depend on it."""

import signal
import sys
import time

signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
while True:
    print(f"HEARTBEAT {time.time():.3f} ok", flush=True)
    time.sleep(1)
