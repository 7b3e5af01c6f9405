"""A workflow host that dies by SIGKILL right after its first release's checkpoint is
stored and before the run is stopped: ``python -m tests.support.workflow_crash_host URL HOST``."""

from __future__ import annotations

import asyncio
import os
import signal
import sys

import corral
from corral.workflows.llama import LlamaHost
from tests.support.workflow_app import hitl


class CrashAfterCheckpoint(LlamaHost):
    def after_checkpoint(self, handler_id: str) -> None:
        os.kill(os.getpid(), signal.SIGKILL)


async def main(url: str, host: str) -> None:
    with corral.connect(url) as client:
        await CrashAfterCheckpoint(client, {"hitl": hitl}, host=host, poll_interval=0.02).run(
            asyncio.Event()
        )


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
