"""Logs reopened on command, through the whole chain: the supervisor's
``reopen_logs`` (what `corral ctl reopen` calls) and SIGHUP to the supervisor reopen
its own files and make the log daemon reopen every agent's, after an outside tool
moved them; no line is lost across the move."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path

from tests.integration.test_supervisor_daemon import make, manifest, st, supervise, until

TICKER = "i=0; while :; do echo tick $i; i=$((i+1)); sleep 0.02; done"


def numbers(*files: Path) -> list[int]:
    return [int(line.split()[1]) for f in files for line in f.read_text().splitlines()]


def test_reopen_by_command_and_by_sighup_moves_on_to_new_files(tmp_path: Path) -> None:
    sup = make(
        tmp_path, manifest([{"id": "t", "cmd": "sh", "args": ["-c", TICKER], "heartbeat": "none"}])
    )
    logs = tmp_path / "state" / "logs"
    out, own = logs / "t" / "stdout.log", logs / "supervisor" / "supervisor.log"
    moved = [tmp_path / "moved1.log", tmp_path / "moved2.log"]

    async def scenario() -> None:
        await until(lambda: st(sup, "t")["state"] == "RUNNING" and out.exists() and out.read_text())
        reopens: list[Callable[[], None]] = [
            sup.reopen_logs,
            lambda: os.kill(os.getpid(), signal.SIGHUP),
        ]
        for n, reopen in enumerate(reopens):
            os.rename(out, moved[n])
            os.rename(own, tmp_path / f"own{n}.log")
            reopen()
            await until(
                lambda: out.exists() and out.read_text().count("\n") >= 3,
                what="ticks in a new stdout.log",
            )
            assert own.exists()  # the supervisor's own log reopened too
            size = moved[n].stat().st_size
            await until(lambda: out.read_text().count("\n") >= 10, what="more ticks")
            assert moved[n].stat().st_size == size  # the moved file is left alone

    supervise(sup, scenario)
    # every tick once, in order, across the two moves
    got = numbers(*moved, out)
    assert got == list(range(len(got)))
