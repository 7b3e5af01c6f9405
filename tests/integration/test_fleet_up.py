"""``corral up`` end to end, as real processes, checked from the cluster's events:
the fleet example drains its board (scaled to max while deep, back to 0 after
idle_timeout, nothing left after Ctrl-C); a member killed mid-task is replaced and
its task finished once; several pools never pass max_agents; a second corral up in
the same directory fails in under a second; a bad manifest exits 2."""

from __future__ import annotations

import itertools
import json
import signal
import subprocess
import time
from pathlib import Path

import httpx
import psutil
import pytest

from corral.server.auth import Tokens
from tests.support.backends import postgres as pg
from tests.support.fleet_up import Up, copy_example, corral_cmd, env, marked, wait_for

pytestmark = pytest.mark.slow


def members_alive(up: Up, pool: str = "worker") -> set[str]:
    """Members whose last reported process state is not STOPPED (from the events)."""
    state: dict[str, str] = {}
    for e in up.events("process_state"):
        agent = e.data.get("agent", "")
        if agent.startswith(pool + "-"):
            state[agent] = e.data.get("to")
    return {a for a, s in state.items() if s != "STOPPED"}


def work_seconds(directory: Path, seconds: str) -> None:
    """The example's workers take ``seconds`` per task."""
    p = directory / "fleet.toml"
    text = p.read_text().replace(
        'args = ["fleet_worker.py"]',
        f'args = ["fleet_worker.py"]\nenv = {{ FLEET_WORK_SECONDS = "{seconds}" }}',
    )
    p.write_text(text)


def worker_process(up: Up) -> psutil.Process | None:
    for p in up.descendants():
        try:
            if "fleet_worker.py" in " ".join(p.cmdline()):
                return p
        except psutil.Error:  # it exited since it was listed
            continue
    return None


def test_the_fleet_example_drains_its_board_and_retires_its_workers(tmp_path: Path) -> None:
    copy_example(tmp_path)
    up = Up(tmp_path)
    try:
        assert up.info["pools"] == {
            "worker": {"role": "developer", "scale": "auto", "min": 0, "max": 3}
        }
        assert up.info["seeded"] == 12
        wait_for(lambda: up.done() == 12, 60, "every seeded task done")
        # back to 0 members after idle_timeout, through the workers' own retirement
        wait_for(lambda: up.events("node_status") and not members_alive(up), 30, "members gone")
        scaled = up.scaled("worker")
        assert max(e.data["to"] for e in scaled) == 3  # up to max while the board was deep
        assert all(e.data["to"] <= 3 for e in scaled)
        retired = [e.node_id for e in up.events("node_status") if e.data["new"] == "terminated"]
        assert sorted(retired) == ["worker-1", "worker-2", "worker-3"]
        # no member was restarted: each retired once and stayed stopped
        restarts = [e for e in up.events("process_state") if e.data["from"] == "UNHEALTHY"]
        assert restarts == []
        # A decision that reverses the pool's last change waits out the cooldown (1 s)
        # after it; members that retire themselves are changes of size too, recorded
        # when seen (cause "exit"). In auto mode a change onward (growth after growth,
        # a retirement after a retirement: idle members retiring one after another as
        # the board drains) is no flap and is not held back.
        assert any(e.data["cause"] == "decision" for e in scaled)
        for a, b in itertools.pairwise(scaled):
            onward = (b.data["to"] - b.data["from"]) * (a.data["to"] - a.data["from"]) > 0
            if b.data["cause"] == "decision" and not onward:
                assert b.data["at"] >= a.data["at"] + 1.0, (a.data, b.data)
        for what in ("spawned", "ready", "claimed", "finished", "retired"):

            def logged(w: str = what) -> bool:
                return w in {x["event"] for x in up.lines}

            wait_for(logged, 5, f"a {what} line")
        assert up.descendants()  # the relay and the log daemon still run
    finally:
        rc = up.stop(signal.SIGINT)
    assert rc == 0
    wait_for(lambda: not marked(tmp_path), 10, "no process left")


def test_members_get_a_node_token_of_their_own(tmp_path: Path) -> None:
    copy_example(tmp_path)
    work_seconds(tmp_path, "2")
    up = Up(tmp_path)
    try:
        member = wait_for(lambda: worker_process(up), 30, "a member")
        e = member.environ()
        operator = (tmp_path / ".corral" / "token").read_text().strip()
        assert e["CORRAL_URL"] == up.info["http"]
        assert e["CORRAL_TOKEN"] != operator
        assert e["CORRAL_TOKEN"] == Tokens(operator).node_token(e["CORRAL_AGENT_ID"])
        assert e["CORRAL_AGENT_ID"].startswith("worker-")
        assert (e["CORRAL_POOL"], e["CORRAL_ROLE"]) == ("worker", "developer")
        # corral ctl in the same directory reaches this supervisor without --state-dir
        out = subprocess.run(
            corral_cmd("ctl", "status", "--json"),
            cwd=tmp_path,
            env=env(),
            capture_output=True,
            text=True,
            timeout=10,
        )
        assert out.returncode == 0, out.stderr
        assert "relay" in {row["agent"] for row in json.loads(out.stdout)}
    finally:
        assert up.stop() == 0


def test_a_member_killed_mid_task_is_replaced_and_the_task_finished_once(tmp_path: Path) -> None:
    copy_example(tmp_path)
    (tmp_path / "tasks.jsonl").write_text('{"title": "the long one"}\n')
    work_seconds(tmp_path, "4")
    up = Up(tmp_path)
    try:
        claim = wait_for(lambda: up.events("task_claimed"), 30, "a claim")[0]
        victim = claim.node_id
        node = up.cluster.get_node(victim)
        psutil.Process(node.pid).kill()  # SIGKILL mid-task
        killed_at = time.time()
        wait_for(lambda: up.done() == 1, 60, "the task done")
        recovered = up.events("lease_recovered")
        assert [e.task_id for e in recovered] == [claim.task_id]
        assert node.heartbeat_interval is not None
        window = node.heartbeat_interval * 3  # missed_beats intervals: the threshold
        assert recovered[0].ts - killed_at >= window - 1.5
        assert len(up.events("task_completed")) == 1
        restarted = [
            e
            for e in up.events("process_state")
            if e.data["agent"] == victim and e.data["from"] == "UNHEALTHY"
        ]
        assert restarted, "the killed member was restarted (replaced)"
    finally:
        assert up.stop() == 0
    wait_for(lambda: not marked(tmp_path), 10, "no process left")


SEVERAL = """
[cluster]
settings = { max_agents = 4, idle_timeout_seconds = 2, grace_period_seconds = 5 }

[board]
seed = "tasks.jsonl"
"""
POOL = """
[[pools]]
id = "{id}"
cmd = "python3"
args = ["fleet_worker.py"]
cwd = "."
env = {{ FLEET_WORK_SECONDS = "0.5" }}
role = "developer"
max = 3
cooldown = 0.5
"""


def test_several_pools_never_pass_max_agents(tmp_path: Path) -> None:
    copy_example(tmp_path)
    (tmp_path / "tasks.jsonl").write_text("".join(f'{{"title": "t{i}"}}\n' for i in range(30)))
    (tmp_path / "many.toml").write_text(SEVERAL + "".join(POOL.format(id=p) for p in "abc"))
    up = Up(tmp_path, "many.toml")
    try:
        wait_for(lambda: up.done() == 30, 90, "every task done")
        live, peak = set(), 0
        for e in up.events():
            if e.kind == "node_registered":
                live.add(e.node_id)
            elif e.kind in ("node_status", "node_retired", "node_dead") and (
                e.kind != "node_status" or e.data["new"] == "terminated"
            ):
                live.discard(e.node_id)
            peak = max(peak, len(live))
        assert 1 < peak <= 4
        ups = [e for e in up.scaled() if e.data["to"] > e.data["from"]]
        assert len({e.data["pool"] for e in ups}) >= 2  # the pools competed
    finally:
        assert up.stop() == 0


def test_a_second_corral_up_in_the_same_directory_fails_at_once(tmp_path: Path) -> None:
    copy_example(tmp_path)
    up = Up(tmp_path)
    try:
        t = time.monotonic()
        second = subprocess.run(
            corral_cmd("up", "fleet.toml", "--port", "0"),
            cwd=tmp_path,
            env=env(),
            capture_output=True,
            text=True,
            timeout=10,
        )
        elapsed = time.monotonic() - t
        assert second.returncode == 1
        assert elapsed < 1.0
        err = second.stderr.strip().splitlines()
        assert len(err) == 1 and "already running" in err[0], second.stderr
        assert second.stdout == ""
    finally:
        assert up.stop() == 0


def test_a_bad_manifest_exits_2_naming_the_file_and_field(tmp_path: Path) -> None:
    copy_example(tmp_path)
    bad = (tmp_path / "fleet.toml").read_text().replace("max = 3", "max = -3")
    (tmp_path / "fleet.toml").write_text(bad)
    out = subprocess.run(
        corral_cmd("up", "fleet.toml", "--port", "0"),
        cwd=tmp_path,
        env=env(),
        capture_output=True,
        text=True,
        timeout=10,
    )
    assert out.returncode == 2
    err = out.stderr.strip().splitlines()
    assert len(err) == 1 and "fleet.toml: pool worker: max:" in err[0], out.stderr
    assert not (tmp_path / ".corral").exists()  # nothing started, nothing written


ASK = """
[cluster]
settings = { max_agents = 6, idle_timeout_seconds = 2, grace_period_seconds = 5 }

[board]
seed = "tasks.jsonl"

[[pools]]
id = "ask"
cmd = "python3"
args = ["fleet_worker.py"]
cwd = "."
env = { FLEET_WORK_SECONDS = "0.3" }
role = "developer"
max = 2
cooldown = 600
scale = "ask"
"""


def ctl(directory: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        corral_cmd("ctl", *args),
        cwd=directory,
        env=env(),
        capture_output=True,
        text=True,
        timeout=10,
    )


def test_ask_spawns_nothing_until_accepted_and_nothing_after_a_decline(tmp_path: Path) -> None:
    copy_example(tmp_path)
    (tmp_path / "tasks.jsonl").write_text("".join(f'{{"title": "t{i}"}}\n' for i in range(3)))
    (tmp_path / "ask.toml").write_text(ASK)
    up = Up(tmp_path, "ask.toml")
    try:
        wait_for(lambda: len(up.cluster.spawn_requests(status="pending")) == 2, 30, "2 requests")
        out = ctl(tmp_path, "requests", "--json")
        assert out.returncode == 0, out.stderr
        listed = json.loads(out.stdout)
        assert [(r["pool"], r["status"]) for r in listed] == [("ask", "pending")] * 2
        assert {"id", "pool", "status"} <= set(listed[0])
        # nothing spawned while the requests wait
        assert not [e for e in up.events("process_state") if e.data["agent"].startswith("ask-")]
        first, second = (r["id"] for r in listed)
        declined = ctl(tmp_path, "decline", str(first), "--json")
        assert declined.returncode == 0 and json.loads(declined.stdout)["status"] == "declined"
        assert ctl(tmp_path, "accept", str(second)).returncode == 0
        wait_for(lambda: up.done() == 3, 60, "the board drained by the one member")
        fulfilled = up.events("spawn_request_fulfilled")
        assert [(e.data["id"], e.node_id) for e in fulfilled] == [(second, "ask-1")]
        agents = {e.data["agent"] for e in up.events("process_state")}
        assert agents == {"ask-1"}  # one request, one spawn; nothing for the decline
        decisions = [
            (e.kind, e.data["actor"])
            for e in up.events()
            if e.kind in ("spawn_request_accepted", "spawn_request_declined")
        ]
        assert decisions == [
            ("spawn_request_declined", "operator"),
            ("spawn_request_accepted", "operator"),
        ]
        again = ctl(tmp_path, "accept", str(first))
        assert again.returncode == 2 and "already declined" in again.stderr
    finally:
        assert up.stop() == 0


def test_with_a_cluster_url_it_still_serves_http_over_that_store(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = pg.fresh_database(request)
    copy_example(tmp_path)
    p = tmp_path / "fleet.toml"
    p.write_text(p.read_text().replace("[cluster]\n", f'[cluster]\nurl = "{url}"\n', 1))
    up = Up(tmp_path, url=url)
    try:
        assert up.info["cluster"] == url
        wait_for(lambda: up.done() == 12, 60, "the board drained on PostgreSQL")
        token = (tmp_path / ".corral" / "token").read_text().strip()
        r = httpx.get(
            up.info["http"] + "/v1/tasks",
            params={"status": "done", "limit": 100},
            headers={"Authorization": f"Bearer {token}"},
            timeout=10,
        )
        assert r.status_code == 200 and len(r.json()) == 12
        assert not (tmp_path / ".corral" / "corral.db").exists()  # no embedded store
    finally:
        assert up.stop() == 0
