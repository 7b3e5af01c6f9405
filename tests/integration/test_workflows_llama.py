"""corral.workflows.llama with the real ``llama-index-workflows``: idle reported from
the package's own event, released by the cluster's policy, resumed (on this host or
another process) with the same result as a run never released, deadlines kept across
a release, idle reported again after a resume, many runs at once, and a host killed
between a release's checkpoint and the run's stop."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

import corral
from corral.workflows.llama import LlamaHost, Served
from tests.support.backends import postgres as pg
from tests.support.workflow_app import REACHED, hitl, timed, two, unpicklable, unreleased

ROOT = Path(__file__).resolve().parents[2]
SERVED: dict[str, Any] = {"hitl": hitl, "timed": timed, "two": two, "unpicklable": unpicklable}


async def until(check: Callable[[], Any], timeout: float = 10.0, every: float = 0.01) -> Any:
    """``check()``'s first truthy answer, polled until ``timeout`` (then fail)."""
    deadline = time.monotonic() + timeout
    while True:
        got = await asyncio.to_thread(check)
        if got:
            return got
        assert time.monotonic() < deadline, f"not within {timeout} s: {check}"
        await asyncio.sleep(every)


@asynccontextmanager
async def hosting(
    c: Any, served: dict[str, Any] | None = None, *, host: str = "hA", poll: float = 0.02
) -> AsyncIterator[LlamaHost]:
    h = LlamaHost(c, served or SERVED, host=host, poll_interval=poll)
    stop = asyncio.Event()
    task = asyncio.create_task(h.run(stop))
    try:
        await asyncio.wait_for(h.ready.wait(), 10)
        yield h
    finally:
        stop.set()
        await task


@pytest.fixture
def c(tmp_path: Path) -> Any:
    client = corral.connect(f"sqlite:///{tmp_path / 'wf.db'}")
    yield client
    client.close()


def status(c: Any, handler_id: str, *wanted: str) -> Callable[[], Any]:
    def check() -> Any:
        h = c.get_handler(handler_id)
        return h if h.status in wanted else None

    return check


def test_a_waiting_run_is_reported_idle_within_100_ms(c: Any) -> None:
    async def scenario() -> None:
        async with hosting(c):
            handler_id = c.run_workflow("hitl", topic="idle-latency")
            h = await until(
                lambda: c.get_handler(handler_id).idle_since and c.get_handler(handler_id)
            )
            assert h.idle_since - REACHED["idle-latency"] < 0.1
            assert [(w["step"], w["event_type"]) for w in h.active_waiters] == [("ask", "Answer")]
            assert h.active_waiters[0]["deadline"] == pytest.approx(
                REACHED["idle-latency"] + 3600, abs=0.1
            )
            (listed,) = c.list_handlers(status="running", idle=True)
            assert listed.handler_id == handler_id

    asyncio.run(scenario())


def test_released_after_idle_release_after_and_resumed_with_the_same_result(c: Any) -> None:
    c.configure(idle_release_after=0.5)

    async def scenario() -> None:
        baseline = await unreleased(hitl, ["yes"], topic="same")
        async with hosting(c):
            handler_id = c.run_workflow("hitl", topic="same")
            h = await until(status(c, handler_id, "released"))
            assert 0.5 <= h.released_at - h.idle_since < 0.5 + 0.25
            c.send_event(handler_id, "Answer", {"text": "yes"})
            done = await until(status(c, handler_id, "completed"))
        assert done.result == baseline == {"topic": "same", "answer": "yes"}
        assert done.resumes == 1
        kinds = [e.kind for e in c.events()]
        assert kinds.count("workflow_released") == kinds.count("workflow_finished") == 1

    asyncio.run(scenario())


def test_a_timed_wait_still_times_out_on_time_across_a_release(c: Any) -> None:
    """wait_for_event(timeout=1.5), released at 0.5 s: times out at 1.5 s (±100 ms)."""

    async def scenario() -> None:
        async with hosting(c, {"timed": Served(timed, idle_release_after=0.5)}):
            handler_id = c.run_workflow("timed", topic="deadline")
            await until(status(c, handler_id, "released"))
            done = await until(status(c, handler_id, "completed"), timeout=5)
        assert done.resumes == 1
        assert done.result["timed_out_at"] - REACHED["deadline"] == pytest.approx(1.5, abs=0.1)

    asyncio.run(scenario())


def test_a_resumed_run_that_waits_again_is_reported_idle_again(c: Any) -> None:
    c.configure(idle_release_after=0.3)

    async def scenario() -> None:
        async with hosting(c):
            handler_id = c.run_workflow("two")
            await until(status(c, handler_id, "released"))
            c.send_event(handler_id, "Answer", {"text": "one"})
            again = await until(
                lambda: (h := c.get_handler(handler_id)).resumes == 1 and h.idle_since and h
            )
            assert [w["waiter_id"] for w in again.active_waiters] == ["second"]
            await until(
                lambda: (
                    c.get_handler(handler_id).resumes == 1
                    and c.get_handler(handler_id).status == "released"
                )
            )
            c.send_event(handler_id, "Answer", {"text": "two"})
            done = await until(status(c, handler_id, "completed"))
        assert done.result == ["one", "two"] == await unreleased(two, ["one", "two"])
        assert [e.kind for e in c.events()].count("workflow_idle") == 2

    asyncio.run(scenario())


def test_release_by_hand_before_the_delay_and_resume_without_an_event(c: Any) -> None:
    """The operator's Release of an idle run whose delay is an hour: its host releases it
    at its next poll (checkpoint, then stop). Resume: the host restores it without an
    event, it waits again (idle again, the same wait), and the Answer then finishes it
    with the result of a run never released. Each step's event names the actor."""
    c.configure(idle_release_after=3600)

    async def scenario() -> None:
        baseline = await unreleased(hitl, ["yes"], topic="by-hand")
        async with hosting(c):
            handler_id = c.run_workflow("hitl", topic="by-hand")
            await until(lambda: c.get_handler(handler_id).idle_since)
            asked = c.release_workflow(handler_id, actor="token:alice")
            h = await until(status(c, handler_id, "released"))
            assert asked.release_requested_at is not None and h.release_requested_at is None
            assert h.released_at - asked.release_requested_at < 1.0  # the host polls at 20 ms
            assert c.resume_workflow(handler_id, actor="token:alice").status == "released"
            back = await until(
                lambda: (x := c.get_handler(handler_id)).resumes == 1 and x.idle_since and x
            )
            assert (back.status, back.host) == ("running", "hA")
            assert [(w["step"], w["event_type"]) for w in back.active_waiters] == [
                ("ask", "Answer")
            ]
            c.send_event(handler_id, "Answer", {"text": "yes"})
            done = await until(status(c, handler_id, "completed"))
        assert done.result == baseline == {"topic": "by-hand", "answer": "yes"}
        assert done.resumes == 1
        steps = [
            (e.kind, e.data.get("actor"), e.data.get("restored"))
            for e in c.events()
            if e.kind.startswith("workflow_") and e.kind not in ("workflow_host", "workflow_idle")
        ]
        assert [e.kind for e in c.events()].count("workflow_idle") == 2  # restored: idle again
        assert steps == [
            ("workflow_started", None, False),
            ("workflow_release_requested", "token:alice", None),
            ("workflow_released", None, None),
            ("workflow_resume_requested", "token:alice", None),
            ("workflow_resumed", None, True),
            ("workflow_finished", None, None),
        ]

    asyncio.run(scenario())


def test_a_run_that_cannot_checkpoint_stays_resident_and_says_why(c: Any) -> None:
    c.configure(idle_release_after=0.1)

    async def scenario() -> None:
        async with hosting(c):
            handler_id = c.run_workflow("unpicklable")
            h = await until(
                lambda: c.get_handler(handler_id).resident_reason and c.get_handler(handler_id)
            )
            assert h.resident_reason.startswith("cannot checkpoint")
            await asyncio.sleep(0.3)
            assert c.get_handler(handler_id).status == "running"
            c.send_event(handler_id, "Answer", {"text": "fine"})
            done = await until(status(c, handler_id, "completed"))
        assert done.result == "fine"

    asyncio.run(scenario())


def _serve(url: str, host: str, *extra: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from corral.cli import main; main()",
            "--url",
            url,
            "workflows",
            "serve",
            "tests.support.workflow_app:hitl",
            "--host",
            host,
            *extra,
        ],
        cwd=ROOT,
    )


@pytest.mark.slow
def test_a_run_released_by_one_host_process_resumes_on_another(
    request: pytest.FixtureRequest,
) -> None:
    url = pg.fresh_database(request)
    with corral.connect(url) as c:
        c.configure(idle_release_after=0.3)
        a = _serve(url, "host-a")
        try:

            async def scenario() -> Any:
                await until(lambda: _serving(c, "host-a"), timeout=20)
                handler_id = c.run_workflow("hitl", topic="moved")
                await until(status(c, handler_id, "released"), timeout=20)
                a.send_signal(signal.SIGTERM)
                assert await asyncio.to_thread(a.wait, 20) == 0
                b = _serve(url, "host-b")
                try:
                    c.send_event(handler_id, "Answer", {"text": "elsewhere"})
                    return await until(status(c, handler_id, "completed"), timeout=20)
                finally:
                    b.send_signal(signal.SIGTERM)
                    b.wait(20)

            done = asyncio.run(scenario())
        finally:
            if a.poll() is None:
                a.kill()
        assert (done.host, done.resumes) == ("host-b", 1)
        assert done.result == {"topic": "moved", "answer": "elsewhere"}


def _serving(c: Any, host: str) -> bool:
    """Whether ``host`` has told the cluster what it serves."""
    return any(e.kind == "workflow_host" and e.data["host"] == host for e in c.events())


@pytest.mark.slow
def test_a_host_killed_between_checkpoint_and_stop_loses_and_duplicates_nothing(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'crash.db'}"
    with corral.connect(url) as c:
        c.configure(idle_release_after=0.2)
        crash = subprocess.Popen(
            [sys.executable, "-m", "tests.support.workflow_crash_host", url, "doomed"], cwd=ROOT
        )
        try:
            asyncio.run(until(lambda: _serving(c, "doomed"), timeout=20))
            handler_id = c.run_workflow("hitl", topic="survivor")
            assert crash.wait(30) == -signal.SIGKILL
        finally:
            if crash.poll() is None:
                crash.kill()
        h = c.get_handler(handler_id)
        assert h.status == "released"

        async def scenario() -> Any:
            async with hosting(c, {"hitl": hitl}, host="heir"):
                c.send_event(handler_id, "Answer", {"text": "still here"})
                return await until(status(c, handler_id, "completed"))

        done = asyncio.run(scenario())
        assert done.result == {"topic": "survivor", "answer": "still here"}
        assert (done.host, done.resumes) == ("heir", 1)
        finished = [
            e
            for e in c.events(limit=10_000)
            if e.kind == "workflow_finished" and e.data["handler_id"] == handler_id
        ]
        assert len(finished) == 1


@pytest.mark.slow
def test_a_thousand_idle_runs_are_released_and_resumed(c: Any) -> None:
    n = 1000

    async def scenario() -> list[Any]:
        async with hosting(c, poll=0.05) as host:
            ids = [c.run_workflow("hitl", topic=f"t{i}") for i in range(n)]
            await until(lambda: len(c.list_handlers(idle=True, limit=n)) == n, timeout=120)
            assert len(host.resident) == n
            c.configure(idle_release_after=0.1)
            await until(lambda: len(c.list_handlers(status="released", limit=n)) == n, timeout=120)
            assert host.resident == {}
            for i, handler_id in enumerate(ids):
                c.send_event(handler_id, "Answer", {"text": f"a{i}"})
            await until(lambda: len(c.list_handlers(status="completed", limit=n)) == n, timeout=120)
            return [c.get_handler(h) for h in ids]

    done = asyncio.run(scenario())
    assert [h.result for h in done] == [{"topic": f"t{i}", "answer": f"a{i}"} for i in range(n)]
    assert all(h.resumes == 1 for h in done)


@pytest.mark.slow
def test_the_documented_human_in_the_loop_example_runs_end_to_end(tmp_path: Path) -> None:
    """docs/workflows.md's commands, with examples/hitl_workflow.py served."""
    url = f"sqlite:///{tmp_path / 'docs.db'}"
    env = {**os.environ, "CORRAL_URL": url}

    def corral_cli(*args: str) -> str:
        proc = subprocess.run(
            [sys.executable, "-c", "from corral.cli import main; main()", *args],
            cwd=ROOT / "examples",
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    corral_cli("init")
    corral_cli("config", "set", "idle_release_after", "0.5")
    serving = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from corral.cli import main; main()",
            "workflows",
            "serve",
            "hitl_workflow:review",
            "--host",
            "docs-host",
        ],
        cwd=ROOT / "examples",
        env=env,
    )
    try:
        with corral.connect(url) as c:
            asyncio.run(until(lambda: _serving(c, "docs-host"), timeout=20))
            handler_id = corral_cli(
                "workflows", "run", "review", "--kwargs", '{"customer": "Ada"}'
            ).strip()
            asyncio.run(until(lambda: handler_id in corral_cli("workflows", "list", "--idle")))
            assert "Answer" in corral_cli("workflows", "list", "--idle")
            asyncio.run(until(lambda: c.get_handler(handler_id).status == "released"))
            assert handler_id in corral_cli("workflows", "list", "--status", "released")
            corral_cli("workflows", "send", handler_id, "Answer", "--data", '{"approved": true}')
            asyncio.run(until(lambda: c.get_handler(handler_id).status == "completed"))
            shown = json.loads(corral_cli("workflows", "show", handler_id, "--json"))
            assert shown["result"] == {
                "draft": "Dear Ada, your refund is on its way.",
                "status": "sent",
                "note": "",
            }
    finally:
        serving.send_signal(signal.SIGTERM)
        assert serving.wait(20) == 0


@pytest.mark.slow
def test_two_hosts_on_postgresql_share_the_runs_and_resume_each_once(
    request: pytest.FixtureRequest,
) -> None:
    url = pg.fresh_database(request)
    n = 200
    with corral.connect(url) as c, corral.connect(url) as a, corral.connect(url) as b:
        c.configure(idle_release_after=0.3)

        async def scenario() -> list[Any]:
            async with (
                hosting(a, {"hitl": hitl}, host="pg-a"),
                hosting(b, {"hitl": hitl}, host="pg-b"),
            ):
                ids = [c.run_workflow("hitl", topic=f"p{i}") for i in range(n)]
                await until(lambda: len(c.list_handlers(status="released", limit=n)) == n, 60)
                for i, handler_id in enumerate(ids):
                    c.send_event(handler_id, "Answer", {"text": f"a{i}"})
                await until(lambda: len(c.list_handlers(status="completed", limit=n)) == n, 60)
                return [c.get_handler(h) for h in ids]

        done = asyncio.run(scenario())
        assert [h.result for h in done] == [{"topic": f"p{i}", "answer": f"a{i}"} for i in range(n)]
        assert {h.resumes for h in done} == {1}
        restored = [
            e.data["handler_id"]
            for e in c.events(limit=10_000)
            if e.kind == "workflow_resumed" and e.data.get("restored")
        ]
        assert sorted(restored) == sorted(h.handler_id for h in done)  # each exactly once


@pytest.mark.parametrize("cluster", ["http"], indirect=True)
def test_a_host_over_http_runs_releases_and_resumes(cluster: Any) -> None:
    """The host's operations over the HTTP API (operator token), with a real workflow."""
    c = cluster

    async def scenario() -> Any:
        async with hosting(c, {"hitl": hitl}, host="http-host") as host:
            handler_id = c.run_workflow("hitl", topic="over-http")
            await until(lambda: c.get_handler(handler_id).idle_since is not None)
            assert await host.release(handler_id)
            assert c.get_handler(handler_id).status == "released"
            c.send_event(handler_id, "Answer", {"text": "via http"})
            return await until(status(c, handler_id, "completed"))

    done = asyncio.run(scenario())
    assert (done.result, done.resumes) == ({"topic": "over-http", "answer": "via http"}, 1)
