"""The supervisor with real processes and real signals: restart policies by exit
kind, backoff timing, startup and heartbeat timeouts, dependency order, WAITING with
SIGUSR1/SIGUSR2, cascade stop, stop timeouts that block nothing else, operator
stop/start, exhaustion; then a supervisor SIGKILLed and started again adopting its
children (real subprocess supervisors)."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import psutil
import pytest

from corral.supervisor.manifest import Manifest, parse_manifest
from corral.supervisor.supervisor import Supervisor

PY = sys.executable
# How late a timer may fire on a loaded 2-core machine (a restart is never early).
LATE = 0.5
FAST = {"backoff_base": 0.05, "backoff_cap": 0.05, "backoff_jitter": 0.0, "restart_limit": 100}


def manifest(agents: list[dict[str, Any]], **settings: Any) -> Manifest:
    return parse_manifest({"supervisor": {**FAST, **settings}, "agents": agents})


def py(code: str) -> dict[str, Any]:
    return {"cmd": PY, "args": ["-c", code]}


def transitions(state_dir: Path, agent: str | None = None) -> list[dict[str, Any]]:
    path = state_dir / "logs" / "supervisor" / "state.log"
    if not path.exists():
        return []
    recs = [json.loads(line) for line in path.read_text().splitlines()]
    return [r for r in recs if agent is None or r["agent"] == agent]


async def until(cond: Callable[[], Any], timeout: float = 15.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while not (value := cond()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)
    return value


def supervise(sup: Supervisor, scenario: Callable[[], Awaitable[None]]) -> None:
    """Run ``sup`` in this process while ``scenario`` runs; shut down after."""

    async def main() -> None:
        task = asyncio.create_task(sup.run())
        try:
            await scenario()
        finally:
            await asyncio.wait_for(sup.shutdown(), 30)
            await asyncio.wait_for(task, 30)

    asyncio.run(main())


def make(tmp_path: Path, m: Manifest, **kw: Any) -> Supervisor:
    return Supervisor(m, state_dir=tmp_path / "state", subreaper=False, **kw)


def st(sup: Supervisor, agent: str) -> dict[str, Any]:
    return next(s for s in sup.status() if s["agent"] == agent)


# ---- restart policies × exit kinds --------------------------------------------------

EXITS = {
    "code0": "raise SystemExit(0)",
    "code1": "raise SystemExit(1)",
    "signal": "import os, signal; os.kill(os.getpid(), signal.SIGKILL)",
}
RESTARTS = {
    ("always", "code0"): True,
    ("always", "code1"): True,
    ("always", "signal"): True,
    ("on-failure", "code0"): False,
    ("on-failure", "code1"): True,
    ("on-failure", "signal"): True,
    ("never", "code0"): False,
    ("never", "code1"): False,
    ("never", "signal"): False,
}


@pytest.mark.parametrize(("policy", "kind"), sorted(RESTARTS))
def test_restart_policy_by_exit_kind(tmp_path: Path, policy: str, kind: str) -> None:
    spawns = tmp_path / "spawns"
    code = f"open({str(spawns)!r}, 'a').write('x'); {EXITS[kind]}"
    sup = make(tmp_path, manifest([{"id": "a", "restart": policy, **py(code)}]))
    restarts = RESTARTS[(policy, kind)]

    async def scenario() -> None:
        if restarts:
            await until(lambda: spawns.exists() and len(spawns.read_text()) >= 2, what="restart")
            assert st(sup, "a")["restarts"] >= 1
        else:
            await until(lambda: st(sup, "a")["state"] == "STOPPED" and st(sup, "a")["last_exit"])
            s = st(sup, "a")
            assert s["restarts"] == 0 and s["pid"] is None
            assert spawns.read_text() == "x"
            seen = [r["to"] for r in transitions(tmp_path / "state", "a")]
            # exit 0 is STOPPED at once; a failure passes through UNHEALTHY
            if kind == "code0":
                assert seen == ["STARTING", "RUNNING", "STOPPED"]
            else:
                assert seen == ["STARTING", "RUNNING", "UNHEALTHY", "STOPPED"]
        last = st(sup, "a")["last_exit"]
        want = {"code0": "exit code 0", "code1": "exit code 1", "signal": "killed by SIGKILL"}
        assert last["describe"] == want[kind]

    supervise(sup, scenario)


def test_crash_records_exit_time_and_last_50_stderr_lines(tmp_path: Path) -> None:
    code = "import sys\nfor i in range(80): print('err', i, file=sys.stderr)\nsys.exit(3)"
    sup = make(tmp_path, manifest([{"id": "a", "restart": "never", **py(code)}]))

    async def scenario() -> None:
        # the tail is read once the log daemon has drained the dead child's stderr
        await until(lambda: (st(sup, "a")["last_exit"] or {}).get("stderr_tail"), what="tail")
        last = st(sup, "a")["last_exit"]
        assert last["code"] == 3 and last["signal"] is None and last["at"] > 0
        assert last["stderr_tail"] == [f"err {i}" for i in range(30, 80)]

    supervise(sup, scenario)
    crash = [
        json.loads(line)
        for line in (tmp_path / "state/logs/supervisor/supervisor.log").read_text().splitlines()
        if '"crash"' in line
    ]
    assert crash and crash[0]["exit"] == "exit code 3" and len(crash[0]["stderr_tail"]) == 50


# ---- backoff ------------------------------------------------------------------------


@pytest.mark.parametrize("jitter_draw", [0.0, 0.5])
def test_backoff_follows_its_schedule_plus_jitter(tmp_path: Path, jitter_draw: float) -> None:
    m = manifest(
        [{"id": "a", "restart": "always", **py("raise SystemExit(1)")}],
        backoff_base=0.2,
        backoff_cap=0.8,
        backoff_jitter=0.4,
    )
    sup = make(tmp_path, m, rand=lambda: jitter_draw)

    async def scenario() -> None:
        await until(lambda: st(sup, "a")["restarts"] >= 5, what="5 restarts")

    supervise(sup, scenario)
    recs = transitions(tmp_path / "state", "a")
    downs = [r for r in recs if r["to"] == "UNHEALTHY"][:4]
    ups = [r["ts"] for r in recs if r["to"] == "STARTING"][1:5]
    schedule = [0.2, 0.4, 0.8, 0.8]
    # The delay each crash was given is exactly its step of the schedule plus its
    # jitter, counted from the exit; the restart came no earlier than it was due
    # (restart_at), and at most LATE after it (the timer's lateness on a loaded
    # machine, not the rule).
    assert [r["restart_in"] for r in downs] == [
        round(step + 0.4 * jitter_draw, 3) for step in schedule
    ]
    for down, up in zip(downs, ups, strict=True):
        assert down["restart_at"] <= up <= down["restart_at"] + LATE, recs
        assert down["restart_at"] - down["restart_in"] <= down["ts"] + 0.001  # from the exit


def test_exhaustion_stops_with_the_flag_and_start_clears_it(tmp_path: Path) -> None:
    m = manifest(
        [{"id": "a", "restart": "always", **py("raise SystemExit(1)")}],
        restart_limit=3,
        restart_window=60,
    )
    sup = make(tmp_path, m)

    async def scenario() -> None:
        await until(lambda: st(sup, "a")["flags"] == ["restart-exhausted"], what="exhausted")
        s = st(sup, "a")
        assert s["state"] == "STOPPED" and s["restarts"] == 3
        await sup.start("a")
        assert st(sup, "a")["flags"] == []
        await until(lambda: st(sup, "a")["restarts"] >= 4, what="restarts again")

    supervise(sup, scenario)
    assert any(r["reason"] == "restart-exhausted" for r in transitions(tmp_path / "state", "a"))


# ---- heartbeats and startup timeout -------------------------------------------------

BEATER = (
    "import sys, time\n"
    "time.sleep(float(sys.argv[1]))\n"
    "while True:\n"
    "    print('work'); print('HEARTBEAT', time.time(), 'healthy', flush=True)\n"
    "    time.sleep(0.1)\n"
)


def test_first_pipe_heartbeat_makes_it_running_and_reaches_the_log(tmp_path: Path) -> None:
    agent = {"id": "a", "cmd": PY, "args": ["-c", BEATER, "0.3"], "heartbeat": "pipe"}
    sup = make(tmp_path, manifest([agent], heartbeat_interval=0.2, heartbeat_timeout=1))

    async def scenario() -> None:
        assert st(sup, "a")["state"] in ("STOPPED", "STARTING")
        await until(lambda: st(sup, "a")["state"] == "RUNNING", what="RUNNING")
        assert st(sup, "a")["last_beat"] is not None
        assert st(sup, "a")["beat_status"] == "healthy"
        log = tmp_path / "state/logs/a/stdout.log"
        await until(lambda: "HEARTBEAT" in log.read_text() and "work" in log.read_text())

    supervise(sup, scenario)
    recs = transitions(tmp_path / "state", "a")
    assert [r["to"] for r in recs][:2] == ["STARTING", "RUNNING"]
    assert recs[1]["ts"] - recs[0]["ts"] >= 0.3  # RUNNING at the beat, not at the spawn


def test_startup_timeout_without_a_beat(tmp_path: Path) -> None:
    agent = {
        "id": "a",
        "restart": "never",
        "heartbeat": "pipe",
        "startup_timeout": 0.5,
        **py("import time; time.sleep(60)"),
    }
    sup = make(tmp_path, manifest([agent]))

    async def scenario() -> None:
        await until(lambda: st(sup, "a")["last_exit"], what="STOPPED")
        assert st(sup, "a")["state"] == "STOPPED"

    supervise(sup, scenario)
    recs = transitions(tmp_path / "state", "a")
    assert [r["to"] for r in recs] == ["STARTING", "UNHEALTHY", "STOPPED"]
    assert recs[1]["reason"] == "startup timeout"
    assert 0.5 <= recs[1]["ts"] - recs[0]["ts"] <= 0.6


def test_heartbeat_timeout_restarts_a_hung_agent(tmp_path: Path) -> None:
    spawns = tmp_path / "spawns"
    code = (
        f"import time; n = len(open({str(spawns)!r}, 'a+').read()); "
        f"open({str(spawns)!r}, 'a').write('x'); "
        "print('HEARTBEAT', time.time(), 'healthy', flush=True); time.sleep(60)"
    )
    agent = {"id": "a", "restart": "on-failure", "heartbeat": "pipe", **py(code)}
    sup = make(tmp_path, manifest([agent], heartbeat_interval=0.2, heartbeat_timeout=0.5))

    async def scenario() -> None:
        await until(lambda: spawns.exists() and len(spawns.read_text()) >= 2, what="restart")

    supervise(sup, scenario)
    recs = transitions(tmp_path / "state", "a")
    hung = next(r for r in recs if r["reason"] == "heartbeat timeout")
    beat = next(r for r in recs if r["to"] == "RUNNING")
    assert 0.5 <= hung["ts"] - beat["ts"] <= 0.6


# ---- dependencies -------------------------------------------------------------------


def test_a_phase_starts_when_the_previous_one_is_running(tmp_path: Path) -> None:
    agents = [
        {"id": "b", "depends_on": ["a"], **py("import time; time.sleep(60)")},
        {"id": "a", "cmd": PY, "args": ["-c", BEATER, "0.4"], "heartbeat": "pipe"},
        {"id": "c", "depends_on": ["b"], **py("import time; time.sleep(60)")},
    ]
    sup = make(tmp_path, manifest(agents))

    async def scenario() -> None:
        await until(lambda: all(s["state"] == "RUNNING" for s in sup.status()))

    supervise(sup, scenario)
    recs = transitions(tmp_path / "state")
    first: dict[tuple[str, str], float] = {}
    for r in recs:
        first.setdefault((r["agent"], r["to"]), r["ts"])
    assert first[("a", "RUNNING")] <= first[("b", "STARTING")] <= first[("c", "STARTING")]
    assert first[("a", "RUNNING")] - first[("a", "STARTING")] >= 0.4


USR = (
    "import signal, sys, time\n"
    "out = sys.argv[1]\n"
    "def note(sig, frame):\n"
    "    open(out, 'a').write(signal.Signals(sig).name + '\\n')\n"
    "signal.signal(signal.SIGUSR1, note)\n"
    "signal.signal(signal.SIGUSR2, note)\n"
    "open(out, 'a').write('up\\n')\n"
    "while True: time.sleep(1)\n"
)


def test_dependents_wait_with_sigusr1_and_resume_with_sigusr2(tmp_path: Path) -> None:
    notes = tmp_path / "notes"
    agents = [
        {"id": "relay", "restart": "always", **py("import time; time.sleep(60)")},
        {"id": "user", "depends_on": ["relay"], "cmd": PY, "args": ["-c", USR, str(notes)]},
    ]
    sup = make(tmp_path, manifest(agents, backoff_base=0.5, backoff_cap=0.5))

    async def scenario() -> None:
        await until(lambda: notes.exists() and notes.read_text() == "up\n", what="user up")
        relay_pid = st(sup, "relay")["pid"]
        os.kill(relay_pid, signal.SIGKILL)
        await until(lambda: st(sup, "user")["state"] == "WAITING", what="WAITING")
        await until(lambda: notes.read_text() == "up\nSIGUSR1\n", what="SIGUSR1 seen")
        assert st(sup, "user")["waiting_on"] == ["relay"]
        await until(lambda: st(sup, "user")["state"] == "RUNNING", what="RUNNING again")
        assert st(sup, "relay")["pid"] != relay_pid
        await until(lambda: notes.read_text() == "up\nSIGUSR1\nSIGUSR2\n", what="SIGUSR2 seen")

    supervise(sup, scenario)
    seen = [(r["from"], r["to"]) for r in transitions(tmp_path / "state", "user")]
    assert seen[:4] == [
        ("STOPPED", "STARTING"),
        ("STARTING", "RUNNING"),
        ("RUNNING", "WAITING"),
        ("WAITING", "RUNNING"),
    ]


TERM_NOTE = (
    "import signal, sys, time\n"
    "def bye(sig, frame):\n"
    "    open(sys.argv[1], 'a').write(sys.argv[2] + '\\n'); sys.exit(0)\n"
    "signal.signal(signal.SIGTERM, bye)\n"
    "open(sys.argv[1] + '.up', 'a').write('x')\n"
    "while True: time.sleep(1)\n"
)


def test_cascade_stop_in_reverse_dependency_order(tmp_path: Path) -> None:
    order = tmp_path / "order"

    def a(agent_id: str, deps: list[str]) -> dict[str, Any]:
        args = ["-c", TERM_NOTE, str(order), agent_id]
        return {"id": agent_id, "depends_on": deps, "cmd": PY, "args": args}

    agents = [a("infra", []), a("mid", ["infra"]), a("u1", ["mid"]), a("u2", ["mid"])]
    sup = make(tmp_path, manifest(agents))
    up = Path(str(order) + ".up")

    async def scenario() -> None:
        await until(lambda: up.exists() and len(up.read_text()) == 4, what="all up")

    supervise(sup, scenario)
    assert order.read_text().split() in (["u2", "u1", "mid", "infra"], ["u1", "u2", "mid", "infra"])
    assert all(s["state"] == "STOPPED" for s in sup.status())


# The agent ignores SIGTERM and says so once the handler is in place.
STUBBORN = (
    "import signal, sys, time\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "open(sys.argv[1], 'w').write('ready')\n"
    "time.sleep(60)\n"
)


def test_stop_timeout_kills_while_other_agents_keep_being_served(tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    agents = [
        {"id": "stubborn", "stop_timeout": 1.5, "cmd": PY, "args": ["-c", STUBBORN, str(ready)]},
        {"id": "flaky", "restart": "always", **py("import time; time.sleep(0.2)")},
        {"id": "steady", "cmd": "sleep", "args": ["60"], "heartbeat": "none"},
    ]
    sup = make(tmp_path, manifest(agents))

    async def scenario() -> None:
        await until(lambda: ready.exists() and st(sup, "steady")["state"] == "RUNNING")
        t0 = time.monotonic()
        restarts0 = st(sup, "flaky")["restarts"]
        stopping = asyncio.create_task(sup.stop("stubborn"))
        # meanwhile the others are served: flaky's exits are handled by its policy,
        # steady is stopped and started again by the operator
        await until(lambda: st(sup, "flaky")["restarts"] >= restarts0 + 2, what="flaky served")
        assert (await sup.stop("steady"))["state"] == "STOPPED"
        assert (await sup.start("steady"))["state"] == "RUNNING"
        assert not stopping.done()  # the stop is still waiting for its timeout
        await stopping
        elapsed = time.monotonic() - t0
        assert 1.5 <= elapsed <= 2.0, elapsed  # killed at its stop_timeout
        last = st(sup, "stubborn")["last_exit"]
        assert last["describe"] == "killed by SIGKILL"
        assert st(sup, "stubborn")["state"] == "STOPPED"

    supervise(sup, scenario)


def test_operator_stop_stays_stopped_and_start_brings_it_back(tmp_path: Path) -> None:
    sup = make(
        tmp_path, manifest([{"id": "a", "restart": "always", **py("import time; time.sleep(60)")}])
    )

    async def scenario() -> None:
        await until(lambda: st(sup, "a")["state"] == "RUNNING")
        s = await sup.stop("a")
        assert s["state"] == "STOPPED" and s["pid"] is None
        assert s["last_exit"]["describe"] == "killed by SIGTERM"
        assert sup.reconcile(time.time()) is None  # nothing pending: no restart
        assert st(sup, "a")["state"] == "STOPPED"
        s = await sup.start("a")
        assert s["state"] == "RUNNING" and s["pid"] and s["restarts"] == 0
        old = s["pid"]
        s = await sup.restart("a")
        assert s["state"] == "RUNNING" and s["pid"] != old
        assert s["restarts"] == 1  # the operator's restart is counted, its budget not
        assert sup.agents["a"].tracker.budget_used(time.time()) == 0

    supervise(sup, scenario)


# ---- a supervisor killed with SIGKILL and started again -------------------------------

RUN = (
    "import asyncio, sys\n"
    "from corral.supervisor.manifest import load_manifest\n"
    "from corral.supervisor.supervisor import Supervisor\n"
    "asyncio.run(Supervisor(load_manifest(sys.argv[1]), state_dir=sys.argv[2]).run())\n"
)
TICKER = "trap : USR1 USR2; while :; do echo tick; sleep 0.05; done"


def wait_for(cond: Callable[[], Any], timeout: float = 20.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while not (value := cond()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)
    return value


def write_manifest(tmp_path: Path, orphans: str = "adopt") -> Path:
    path = tmp_path / "fleet.toml"
    path.write_text(
        f'[supervisor]\nbackoff_base = 0.05\nbackoff_jitter = 0\norphans = "{orphans}"\n'
        f'[[agents]]\nid = "relay"\ncmd = "sh"\nargs = ["-c", "{TICKER}"]\n'
        f'[[agents]]\nid = "user"\ncmd = "sh"\nargs = ["-c", "{TICKER}"]\n'
        'depends_on = ["relay"]\n'
    )
    return path


class Daemon:
    """``Supervisor.run()`` in a real subprocess."""

    def __init__(self, manifest_path: Path, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.proc = subprocess.Popen([PY, "-c", RUN, str(manifest_path), str(state_dir)])

    def pids(self) -> dict[str, Any]:
        try:
            data = json.loads((self.state_dir / "pids.json").read_text())
        except (OSError, ValueError):
            return {}
        if data.get("supervisor_pid") != self.proc.pid:
            return {}
        agents: dict[str, Any] = data["agents"]
        return agents

    def running(self, *agents: str) -> dict[str, int] | None:
        recs = self.pids()
        if all(recs.get(a, {}).get("state") == "RUNNING" and recs[a]["pid"] for a in agents):
            return {a: recs[a]["pid"] for a in agents}
        return None

    def kill(self) -> None:
        self.proc.kill()
        assert self.proc.wait(timeout=20) == -signal.SIGKILL

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=30)


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def log_size(state_dir: Path, agent: str) -> int:
    return (state_dir / "logs" / agent / "stdout.log").stat().st_size


@pytest.mark.slow
def test_sigkilled_supervisor_adopts_its_children_on_restart(tmp_path: Path) -> None:
    state = tmp_path / "state"
    m = write_manifest(tmp_path)
    first = Daemon(m, state)
    try:
        pids = wait_for(lambda: first.running("relay", "user"), what="first run")
    finally:
        first.kill()
    starts_before = len([r for r in transitions(state) if r["to"] == "STARTING"])
    second = Daemon(m, state)
    try:
        assert wait_for(lambda: second.running("relay", "user"), what="adopted") == pids
        log = (state / "logs/supervisor/supervisor.log").read_text()
        assert log.count('"msg": "adopted"') == 2
        # no child was restarted: no new STARTING, the same processes
        assert len([r for r in transitions(state) if r["to"] == "STARTING"]) == starts_before
        assert all(alive(p) for p in pids.values())
        size = log_size(state, "relay")
        wait_for(lambda: log_size(state, "relay") > size, what="relay log growing")
        # a later crash of an adopted child is seen and handled by its policy
        os.kill(pids["relay"], signal.SIGKILL)
        wait_for(
            lambda: (r := second.running("relay", "user")) and r["relay"] != pids["relay"],
            what="relay restarted",
        )
        relay = second.pids()["relay"]
        assert relay["last_exit"]["describe"] == "unknown"  # not our child: status unknown
        assert relay["restarts"] == 1
        user = [(r["from"], r["to"]) for r in transitions(state, "user")][-2:]
        assert user == [("RUNNING", "WAITING"), ("WAITING", "RUNNING")]
        new = second.pids()
    finally:
        assert second.stop() == 0
    assert not alive(new["relay"]["pid"]) and not alive(new["user"]["pid"])
    assert not alive(pids["user"])


@pytest.mark.slow
def test_children_that_died_meanwhile_get_their_policy_and_a_reused_pid_is_not_adopted(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    m = write_manifest(tmp_path)
    first = Daemon(m, state)
    try:
        pids = wait_for(lambda: first.running("relay", "user"), what="first run")
    finally:
        first.kill()
    for pid in pids.values():
        os.killpg(pid, signal.SIGKILL)
    wait_for(lambda: not any(alive(p) for p in pids.values()), what="children gone")
    # "user"'s pid now names an unrelated process (its start time does not match)
    data = json.loads((state / "pids.json").read_text())
    started = data["agents"]["user"]["started_at"]
    wait_for(lambda: time.time() > started + 0.05, what="a later clock tick")
    stranger = subprocess.Popen(["sleep", "60"])
    data["agents"]["user"]["pid"] = stranger.pid
    (state / "pids.json").write_text(json.dumps(data))
    second = Daemon(m, state)
    try:
        now = wait_for(lambda: second.running("relay", "user"), what="restarted by policy")
        assert now["user"] != stranger.pid and now["relay"] != pids["relay"]
        assert stranger.poll() is None  # neither adopted nor signalled
        recs = second.pids()
        assert recs["relay"]["last_exit"]["describe"] == "unknown"
        assert recs["relay"]["restarts"] == 1
    finally:
        assert second.stop() == 0
        stranger.kill()
        stranger.wait()
    assert stranger.returncode == -signal.SIGKILL


@pytest.mark.slow
@pytest.mark.parametrize("orphans", ["adopt", "kill"])
def test_marked_orphans_are_adopted_or_killed(tmp_path: Path, orphans: str) -> None:
    state = tmp_path / "state"
    m = write_manifest(tmp_path, orphans)
    first = Daemon(m, state)
    try:
        pids = wait_for(lambda: first.running("relay", "user"), what="first run")
    finally:
        first.kill()
    (state / "pids.json").unlink()  # as if the last write was lost
    second = Daemon(m, state)
    try:
        now = wait_for(lambda: second.running("relay", "user"), what="second run")
        if orphans == "adopt":
            assert now == pids
        else:
            assert set(now.values()).isdisjoint(pids.values())
            wait_for(lambda: not any(alive(p) for p in pids.values()), what="orphans killed")
    finally:
        assert second.stop() == 0


def test_cluster_heartbeat_is_the_node_of_the_same_id(tmp_path: Path) -> None:
    import corral

    client = corral.connect(f"sqlite:///{tmp_path / 'corral.db'}")
    sleeper = py("import time; time.sleep(60)")
    agent = {"id": "w1", "heartbeat": "cluster", "restart": "never", **sleeper}
    m = manifest([agent], heartbeat_interval=0.1, heartbeat_timeout=0.5)
    sup = make(tmp_path, m, client=client)

    async def scenario() -> None:
        await until(lambda: st(sup, "w1")["state"] == "STARTING", what="STARTING")
        await asyncio.sleep(0.3)  # no node yet: it stays STARTING
        assert st(sup, "w1")["state"] == "STARTING"
        client.register_node("w1", "developer")
        client.heartbeat("w1")
        await until(lambda: st(sup, "w1")["state"] == "RUNNING", what="RUNNING by cluster beat")
        # no further beats: heartbeat timeout, and restart=never stops it
        await until(lambda: st(sup, "w1")["state"] == "STOPPED", what="heartbeat timeout")

    supervise(sup, scenario)
    reasons = [r["reason"] for r in transitions(tmp_path / "state", "w1")]
    assert reasons == ["spawn", "first heartbeat", "heartbeat timeout", "restart=never"]
    # the transitions reach the cluster as process_state events (reports are
    # coalesced: a quick UNHEALTHY -> STOPPED may arrive as one change)
    changes = [
        (e.data["from"], e.data["to"])
        for e in client.events()
        if e.kind == "process_state" and e.data["agent"] == "w1"
    ]
    assert changes[0] == (None, "STARTING") and ("STARTING", "RUNNING") in changes
    assert changes[-1][1] == "STOPPED"
    assert all(a[1] == b[0] for a, b in itertools.pairwise(changes))
    assert [p.state for p in client.list_processes()] == ["STOPPED"]
    client.close()
