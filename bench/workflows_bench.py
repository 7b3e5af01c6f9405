"""Idle workflow runs on corral, side by side with llama-agents-server's own release.

With N idle LlamaIndex runs (a human-in-the-loop workflow waiting for an Answer):

- the Python heap they hold (tracemalloc, after a collection) before and after
  release, the share release frees, and the process RSS beside it;
- release latency per run (checkpoint in the store, then stop) and resume latency
  (event sent through the cluster until the run's result is stored), p50/p99;
- idle detection latency: from the run reaching its wait to its handler showing
  ``idle_since``;
- the same workflow on llama-agents-server's ``WorkflowServer(idle_timeout=…)``
  (its SQLite store, driven through its HTTP app in process): heap per run before
  and after its idle release, and its resume latency (event posted until the result
  is readable).

    python bench/workflows_bench.py [--runs 1000] [--quick] [--out PATH]

Prints a table and writes ``bench/results/workflows.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
from workflows import Context, Workflow, step
from workflows.events import Event, StartEvent, StopEvent

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import corral
from _common import machine_info, percentiles, table, write_json
from corral.workflows.llama import LlamaHost

REACHED: dict[str, float] = {}


class Answer(Event):
    text: str


class Hitl(Workflow):
    @step
    async def ask(self, ctx: Context, ev: StartEvent) -> StopEvent:
        topic = str(ev.get("topic"))
        REACHED.setdefault(topic, time.time())
        answer = await ctx.wait_for_event(Answer, timeout=3600)
        return StopEvent(result={"topic": topic, "answer": answer.text, "pad": "x" * 2000})


def heap() -> int:
    gc.collect()
    return tracemalloc.get_traced_memory()[0]


def rss() -> int:
    return int(psutil.Process().memory_info().rss)


async def until(check: Callable[[], Any], timeout: float, every: float = 0.02) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = await asyncio.to_thread(check)
        if got:
            return got
        if time.monotonic() > deadline:
            raise TimeoutError(f"not within {timeout} s")
        await asyncio.sleep(every)


async def _one_at_a_time(c: Any, host: LlamaHost, k: int) -> tuple[list[float], list[float]]:
    """Idle detection and resume latency of runs started, released and resumed one at
    a time (no backlog): reaching the wait to idle_since; event sent to result stored."""
    idle_ms, resume_ms = [], []
    for i in range(k):
        handler_id = await asyncio.to_thread(c.run_workflow, "hitl", topic=f"s{i}")
        h = await until(lambda hid=handler_id: (h := c.get_handler(hid)).idle_since and h, 30)
        idle_ms.append((h.idle_since - REACHED[f"s{i}"]) * 1000)
        assert await host.release(handler_id)
        sent = time.time()
        await asyncio.to_thread(c.send_event, handler_id, "Answer", {"text": "ok"})
        done = await until(
            lambda hid=handler_id: (h := c.get_handler(hid)).status == "completed" and h, 30
        )
        resume_ms.append(((done.finished_at or 0) - sent) * 1000)
    return idle_ms, resume_ms


async def bench_corral(n: int, tmp: Path, batch: int) -> dict[str, Any]:
    REACHED.clear()
    wf = Hitl(timeout=None)
    with corral.connect(f"sqlite:///{tmp / 'corral.db'}") as c:
        host = LlamaHost(c, {"hitl": wf}, host="bench", poll_interval=0.02)
        stop = asyncio.Event()
        task = asyncio.create_task(host.run(stop))
        await asyncio.wait_for(host.ready.wait(), 30)
        single_idle, single_resume = await _one_at_a_time(c, host, 20)
        base_heap, base_rss = heap(), rss()
        ids = [await asyncio.to_thread(c.run_workflow, "hitl", topic=f"t{i}") for i in range(n)]
        await until(lambda: len(c.list_handlers(idle=True, limit=n)) == n, 600)
        handlers = c.list_handlers(idle=True, limit=n)
        idle_ms = [(h.idle_since - REACHED[f"t{ids.index(h.handler_id)}"]) * 1000 for h in handlers]
        idle_heap, idle_rss = heap(), rss()
        release_ms = []
        for handler_id in ids:
            t0 = time.perf_counter()
            assert await host.release(handler_id)
            release_ms.append((time.perf_counter() - t0) * 1000)
        released_heap, released_rss = heap(), rss()
        resume_ms = []
        for start in range(0, n, batch):
            group = ids[start : start + batch]
            sent = {}
            for handler_id in group:
                sent[handler_id] = time.time()
                await asyncio.to_thread(c.send_event, handler_id, "Answer", {"text": "ok"})
            done = await until(
                lambda g=group: (
                    all(c.get_handler(h).status == "completed" for h in g)
                    and [c.get_handler(h) for h in g]
                ),
                600,
            )
            resume_ms += [((h.finished_at or 0) - sent[h.handler_id]) * 1000 for h in done]
        stop.set()
        await task
    held = idle_heap - base_heap
    left = released_heap - base_heap
    return {
        "runs": n,
        "heap_held_idle_bytes": held,
        "heap_held_released_bytes": left,
        "heap_freed_share": round(1 - left / held, 4) if held else None,
        "heap_per_idle_run_bytes": held // n,
        "heap_per_released_run_bytes": left // n,
        "rss_idle_bytes": idle_rss - base_rss,
        "rss_released_bytes": released_rss - base_rss,
        "idle_detection_ms": percentiles(idle_ms),
        "idle_detection_one_at_a_time_ms": percentiles(single_idle),
        "resume_one_at_a_time_ms": percentiles(single_resume),
        "release_ms": percentiles(release_ms),
        "resume_ms": percentiles(resume_ms),
    }


async def bench_upstream(n: int, tmp: Path, idle_timeout: float, batch: int) -> dict[str, Any]:
    import httpx
    from llama_agents.server import SqliteWorkflowStore, WorkflowServer

    REACHED.clear()
    wf = Hitl(timeout=None)
    server = WorkflowServer(
        workflow_store=SqliteWorkflowStore(str(tmp / "upstream.db")), idle_timeout=idle_timeout
    )
    server.add_workflow("hitl", wf, additional_events=[Answer])
    async with server.contextmanager():
        transport = httpx.ASGITransport(app=server.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://upstream") as http:
            base_heap, base_rss = heap(), rss()
            ids = []
            for i in range(n):
                r = await http.post(
                    "/workflows/hitl/run-nowait", json={"kwargs": {"topic": f"t{i}"}}
                )
                r.raise_for_status()
                ids.append(r.json()["handler_id"])
            await until(lambda: len(REACHED) == n, 600)
            idle_heap, idle_rss = heap(), rss()
            # Its API does not say when a run is released: wait out the timeout, then
            # until its idle-release layer holds no run active (at most 3 minutes).
            t0 = time.monotonic()
            await asyncio.sleep(idle_timeout)
            while (_upstream_active(server) or 0) > 0 and time.monotonic() - t0 < 180:
                await asyncio.sleep(0.1)
            release_wait = time.monotonic() - t0
            still_active = _upstream_active(server)
            released_heap, released_rss = heap(), rss()
            resume_ms = []
            for start in range(0, n, batch):
                group = ids[start : start + batch]
                sent = {}
                for handler_id in group:
                    sent[handler_id] = time.time()
                    body = {"event": {"type": "Answer", "value": {"text": "ok"}}}
                    (await http.post(f"/events/{handler_id}", json=body)).raise_for_status()
                for handler_id in group:
                    while True:
                        r = await http.get(f"/handlers/{handler_id}")
                        if r.json().get("status") == "completed":
                            resume_ms.append((time.time() - sent[handler_id]) * 1000)
                            break
                        await asyncio.sleep(0.01)
    held = idle_heap - base_heap
    left = released_heap - base_heap
    return {
        "runs": n,
        "idle_timeout": idle_timeout,
        "runs_still_active": still_active,
        "seconds_until_released": round(release_wait, 2),
        "heap_held_idle_bytes": held,
        "heap_held_released_bytes": left,
        "heap_freed_share": round(1 - left / held, 4) if held else None,
        "heap_per_idle_run_bytes": held // n,
        "heap_per_released_run_bytes": left // n,
        "rss_idle_bytes": idle_rss - base_rss,
        "rss_released_bytes": released_rss - base_rss,
        "resume_ms": percentiles(resume_ms),
    }


def _upstream_active(server: Any) -> int | None:
    """How many runs llama-agents-server's idle-release layer still holds active (a
    private attribute, read for this report only; None when not found)."""
    layer: Any = getattr(server, "_runtime", None)
    for _ in range(10):
        if layer is None:
            return None
        active = getattr(layer, "_active_run_ids", None)
        if active is not None:
            return len(active)
        layer = getattr(layer, "_decorated", None)
    return None


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=1000)
    p.add_argument("--quick", action="store_true", help="50 runs, for the smoke test")
    p.add_argument("--no-upstream", action="store_true", help="skip llama-agents-server")
    p.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "workflows.json")
    args = p.parse_args()
    n = 50 if args.quick else args.runs
    batch = 50
    tracemalloc.start()
    with tempfile.TemporaryDirectory() as d:
        ours = asyncio.run(bench_corral(n, Path(d), batch))
        theirs = None
        if not args.no_upstream:
            theirs = asyncio.run(bench_upstream(n, Path(d), 1.0 if args.quick else 5.0, batch))
    tracemalloc.stop()
    rows = []
    for name, r in (("corral", ours), ("llama-agents-server", theirs)):
        if r is None:
            continue
        rows.append(
            [
                name,
                r["runs"],
                r["heap_per_idle_run_bytes"],
                r["heap_per_released_run_bytes"],
                r["heap_freed_share"],
                r["rss_idle_bytes"] // 1024,
                r["rss_released_bytes"] // 1024,
                r.get("release_ms", {}).get("p50", "-"),
                r.get("release_ms", {}).get("p99", "-"),
                r["resume_ms"].get("p50"),
                r["resume_ms"].get("p99"),
                r.get("idle_detection_ms", {}).get("p99", "-"),
                r.get("idle_detection_one_at_a_time_ms", {}).get("p99", "-"),
                r.get("resume_one_at_a_time_ms", {}).get("p50", "-"),
            ]
        )
    print(
        table(
            [
                "host",
                "runs",
                "heap/idle run B",
                "heap/released run B",
                "freed",
                "RSS idle KiB",
                "RSS released KiB",
                "release p50 ms",
                "release p99 ms",
                "resume p50 ms",
                "resume p99 ms",
                "idle detect p99 ms",
                "idle detect 1-by-1 p99 ms",
                "resume 1-by-1 p50 ms",
            ],
            rows,
        )
    )
    write_json(
        args.out,
        {
            "bench": "workflows",
            "machine": machine_info(),
            "params": {"runs": n, "batch": batch},
            "corral": ours,
            "llama_agents_server": theirs,
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
