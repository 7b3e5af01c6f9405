"""corral's supervisor side by side with supervisord and circus (issue 17, "Performance").

One run, each system in turn, the same children under each:

1. **Kill → replacement**: each system supervises one child with its restart delay
   at the minimum it allows (corral: ``backoff_base = backoff_cap = backoff_jitter =
   0`` and a restart limit no run reaches; supervisord: ``startsecs=0``,
   ``autorestart=true``; circus: ``check_delay = 0.01`` and, as ``circus_default``,
   its configuration default of 5 s). The child is a small C program that, first
   thing in ``main``, writes its pid and ``CLOCK_MONOTONIC`` to a file (write, then
   rename), then waits in ``pause()``. The bench SIGKILLs it ``--kills`` times (20)
   after a pause of 0.2 s plus a random part of the system's tick (1 s, circus's
   default 5 s) each, so a polling supervisor is caught at every phase of its tick,
   and takes kill → the replacement's own timestamp: the new pid exec'd and running
   its first instruction. The bench polls for the file every
   1 ms only to know when to go on; the latency is the child's clock.
2. **Idle CPU and RSS** with 13 and with 200 such children (blocked in ``pause()``,
   no heartbeats): after a warm-up, the CPU seconds (user + system) of the
   supervisor's own processes over ``--seconds`` (60) and their summed RSS sampled
   every second (psutil's CPU times tick at 10 ms: 0.000 means under 0.01 s), and
   at the end their PSS and USS (shared pages split, or left out). "Own processes"
   is the supervisor process, every process it started that is not a child under
   test, and for corral its log daemon (``STATE_DIR/logd.pid``) when it runs one;
   the JSON lists which processes were counted.
3. **Adoption** (corral only): 200 children RUNNING, the supervisor SIGKILLed, a new
   ``corral supervise`` started over the same state dir; the time from starting it
   to ``status`` answering every agent RUNNING with the same pid as before (via the
   control socket, polled every 2 ms), and then kill → replacement for a few
   adopted children (their exits are watched again).

Run: ``python bench/supervisor_bench.py [--systems corral,supervisord,circus]
[--quick] [--out PATH]``. ``--quick`` is a smoke run (3 kills, 2 s idle windows
with 4 and 20 children, adoption of 20). Prints Markdown tables and writes
``bench/results/supervisor_bench.json``. supervisord and circus come with the
``bench`` extra; the children are compiled with ``cc``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import RESULTS_DIR, machine_info, percentiles, table, write_json

SYSTEMS = ("corral", "supervisord", "circus")
# The kill test's configurations: circus runs twice (check_delay 0.01 and default).
KILL_CONFIGS = {
    "corral": ("corral", {}),
    "supervisord": ("supervisord", {}),
    "circus_0.01": ("circus", {"check_delay": 0.01}),
    "circus_default": ("circus", {}),
}
# The longest tick of each configuration (circus's configuration default check_delay
# is 5 s): the pause before each kill is 0.2 s plus up to one tick, so the kills fall
# at every phase of it.
TICK = {"corral": 1.0, "supervisord": 1.0, "circus_0.01": 1.0, "circus_default": 5.0}
CHILD_C = r"""
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
int main(int argc, char **argv) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    if (argc > 1) {
        char buf[64], tmp[4096];
        int n = snprintf(buf, sizeof buf, "%d %lld.%09ld\n", (int)getpid(),
                         (long long)ts.tv_sec, ts.tv_nsec);
        snprintf(tmp, sizeof tmp, "%s.tmp", argv[1]);
        int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) {
            if (write(fd, buf, n) != n) return 1;
            close(fd);
            rename(tmp, argv[1]);
        }
    }
    for (;;) pause();
}
"""


def build_child(tmp: Path) -> str:
    src, exe = tmp / "child.c", tmp / "child"
    src.write_text(CHILD_C)
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        sys.exit("supervisor_bench: no C compiler (cc) to build the child")
    subprocess.run([cc, "-O2", "-o", str(exe), str(src)], check=True)
    return str(exe)


def read_pidfile(path: Path) -> tuple[int, float] | None:
    try:
        pid, ts = path.read_text().split()
        return int(pid), float(ts)
    except (OSError, ValueError):
        return None


def clean_env() -> dict[str, str]:
    """The bench's environment without corral's variables (no cluster, no supervisor)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("CORRAL_")}


# --- the systems ------------------------------------------------------------------------


class System:
    """One supervisor running ``n`` children (ids c000…), each writing ``pids/ID``."""

    name = ""

    def __init__(self, workdir: Path, child: str, n: int, **opts: Any) -> None:
        self.dir = workdir
        self.child = child
        self.ids = [f"c{i:03d}" for i in range(n)]
        self.pids_dir = workdir / "pids"
        self.pids_dir.mkdir(parents=True, exist_ok=True)
        self.opts = opts
        self.proc: subprocess.Popen[bytes] | None = None

    def pidfile(self, agent: str) -> Path:
        return self.pids_dir / agent

    def command(self) -> list[str]:
        raise NotImplementedError

    def start(self) -> None:
        self.write_config()
        out = open(self.dir / f"{self.name}.out", "ab")  # noqa: SIM115 - owned by the child
        self.proc = subprocess.Popen(
            self.command(),
            stdout=out,
            stderr=subprocess.STDOUT,
            env=clean_env(),
            cwd=self.dir,
            start_new_session=True,
        )
        out.close()

    def write_config(self) -> None:
        raise NotImplementedError

    def own_processes(self, agents: set[int]) -> list[psutil.Process]:
        """The supervisor, what it started that is not an agent, and extra daemons."""
        assert self.proc is not None
        top = psutil.Process(self.proc.pid)
        procs = {top.pid: top}
        for p in top.children(recursive=True):
            if p.pid not in agents:
                procs[p.pid] = p
        for p in self.extra_processes():
            procs.setdefault(p.pid, p)
        return list(procs.values())

    def extra_processes(self) -> list[psutil.Process]:
        return []

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        for agent in self.ids:  # whatever outlived its supervisor
            got = read_pidfile(self.pidfile(agent))
            if got is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(got[0], signal.SIGKILL)


class Corral(System):
    name = "corral"

    def write_config(self) -> None:
        lines = [
            "[supervisor]",
            "backoff_base = 0",
            "backoff_cap = 0",
            "backoff_jitter = 0",
            "restart_limit = 1000000",
            "stop_timeout = 10",
            "",
        ]
        for agent in self.ids:
            lines += [
                "[[agents]]",
                f'id = "{agent}"',
                f'cmd = "{self.child}"',
                f'args = ["{self.pidfile(agent)}"]',
                'restart = "always"',
                'heartbeat = "none"',
                "",
            ]
        (self.dir / "fleet.toml").write_text("\n".join(lines))

    def command(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "corral",
            "supervise",
            str(self.dir / "fleet.toml"),
            "--state-dir",
            str(self.dir / "state"),
        ]

    def extra_processes(self) -> list[psutil.Process]:
        try:
            return [psutil.Process(int((self.dir / "state" / "logd.pid").read_text().split()[0]))]
        except (OSError, ValueError, IndexError, psutil.Error):
            return []

    def stop(self) -> None:
        super().stop()
        for p in self.extra_processes():  # the log daemon outlives the supervisor by design
            with contextlib.suppress(psutil.Error):
                p.terminate()
                p.wait(10)

    def status(self, timeout: float = 5.0) -> list[dict[str, Any]]:
        from corral.supervisor.control import request

        return list(request(self.dir / "state" / "control.sock", "status", timeout=timeout))


class Supervisord(System):
    name = "supervisord"

    def write_config(self) -> None:
        d = self.dir
        lines = [
            "[unix_http_server]",
            f"file={d}/supervisor.sock",
            "",
            "[supervisord]",
            f"logfile={d}/supervisord.log",
            f"pidfile={d}/supervisord.pid",
            "nodaemon=true",
            f"childlogdir={d}",
            "minfds=4096",
            "",
            "[rpcinterface:supervisor]",
            "supervisor.rpcinterface_factory = supervisor.rpcinterface:make_main_rpcinterface",
            "",
            "[supervisorctl]",
            f"serverurl=unix://{d}/supervisor.sock",
            "",
        ]
        for agent in self.ids:
            lines += [
                f"[program:{agent}]",
                f"command={self.child} {self.pidfile(agent)}",
                "startsecs=0",
                "autorestart=true",
                "startretries=1000000",
                "stopwaitsecs=10",
                "",
            ]
        (d / "supervisord.conf").write_text("\n".join(lines))

    def command(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "supervisor.supervisord",
            "-c",
            str(self.dir / "supervisord.conf"),
        ]


class Circus(System):
    name = "circus"

    def write_config(self) -> None:
        d = self.dir
        lines = [
            "[circus]",
            f"endpoint = ipc://{d}/circus.ctl",
            f"pubsub_endpoint = ipc://{d}/circus.pub",
            f"logoutput = {d}/circusd.log",
            "warmup_delay = 0",
        ]
        if "check_delay" in self.opts:
            lines.append(f"check_delay = {self.opts['check_delay']}")
        lines.append("")
        for agent in self.ids:
            lines += [
                f"[watcher:{agent}]",
                f"cmd = {self.child}",
                f"args = {self.pidfile(agent)}",
                "numprocesses = 1",
                "warmup_delay = 0",
                "respawn = true",
                "max_retry = -1",
                "graceful_timeout = 10",
                "",
            ]
        (d / "circus.ini").write_text("\n".join(lines))

    def command(self) -> list[str]:
        return [sys.executable, "-m", "circus.circusd", str(self.dir / "circus.ini")]


CLASSES: dict[str, type[System]] = {"corral": Corral, "supervisord": Supervisord, "circus": Circus}


# --- measuring --------------------------------------------------------------------------


def wait_for(cond: Callable[[], Any], timeout: float, what: str, step: float = 0.001) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = cond()
        if got:
            return got
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(step)


def wait_all_running(sys_: System, timeout: float) -> dict[str, int]:
    """Every child wrote its pid file and that pid is alive: {agent: pid}."""

    def ready() -> dict[str, int] | None:
        pids = {}
        for agent in sys_.ids:
            got = read_pidfile(sys_.pidfile(agent))
            if got is None or not psutil.pid_exists(got[0]):
                return None
            pids[agent] = got[0]
        return pids

    assert sys_.proc is not None

    def ready_or_dead() -> dict[str, int] | None:
        if sys_.proc is not None and sys_.proc.poll() is not None:
            out = (sys_.dir / f"{sys_.name}.out").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"{sys_.name} exited with {sys_.proc.returncode}:\n{out}")
        return ready()

    return wait_for(ready_or_dead, timeout, f"{len(sys_.ids)} children of {sys_.name}", 0.02)


def kill_and_time(sys_: System, agent: str, timeout: float = 15.0) -> float:
    """SIGKILL ``agent``'s process; seconds until its replacement's first instruction."""
    path = sys_.pidfile(agent)
    got = read_pidfile(path)
    assert got is not None
    old = got[0]
    t0 = time.monotonic()
    os.kill(old, signal.SIGKILL)

    def replaced() -> tuple[int, float] | None:
        now = read_pidfile(path)
        return now if now is not None and now[0] != old else None

    _, ts = wait_for(replaced, timeout, f"{sys_.name} to replace pid {old}")
    return ts - t0


def bench_kills(tmp: Path, child: str, config: str, kills: int, rng: random.Random) -> dict:
    system, opts = KILL_CONFIGS[config]
    sys_ = CLASSES[system](tmp / f"kill-{config}", child, 1, **opts)
    sys_.start()
    try:
        wait_all_running(sys_, 60)
        ms = []
        for _ in range(kills):
            time.sleep(0.2 + rng.uniform(0, TICK[config]))
            ms.append(kill_and_time(sys_, "c000") * 1e3)
    finally:
        sys_.stop()
    return {"config": config, "options": opts, "ms": percentiles(ms), "samples_ms": ms}


def cpu_seconds(p: psutil.Process) -> float:
    t = p.cpu_times()
    return t.user + t.system


def describe(cmdline: list[str]) -> str:
    """A process's command in short: its first arguments after the interpreter's
    options, or for ``python … -c CODE LABEL ARGS`` (corral's processes, see
    ``corral.supervisor.boot``) the label and arguments instead of the code."""
    args = cmdline[1:]
    while args and args[0].startswith("-") and args[0] not in ("-c", "-m"):
        args = args[2:] if args[0] in ("-X", "-W") else args[1:]
    if args[:1] == ["-c"] and len(args) > 1 and "\n" in args[1]:
        return " ".join(args[2:5])
    return " ".join(args[:3])


def bench_idle(tmp: Path, child: str, config: str, n: int, seconds: float, warmup: float) -> dict:
    system, opts = KILL_CONFIGS[config]
    sys_ = CLASSES[system](tmp / f"idle-{config}-{n}", child, n, **opts)
    t_start = time.monotonic()
    sys_.start()
    try:
        pids = wait_all_running(sys_, 120 + n)
        startup = time.monotonic() - t_start
        time.sleep(warmup)
        procs = sys_.own_processes(set(pids.values()))
        cpu0 = {p.pid: cpu_seconds(p) for p in procs}
        rss: list[int] = []
        t0 = time.monotonic()
        while True:
            rss.append(sum(p.memory_info().rss for p in procs))
            left = seconds - (time.monotonic() - t0)
            if left <= 0:
                break
            time.sleep(min(1.0, left))
        wall = time.monotonic() - t0
        cpu = sum(cpu_seconds(p) - cpu0[p.pid] for p in procs)
        full = [p.memory_full_info() for p in procs]  # USS, PSS: shared pages not double-counted
        names = [{"pid": p.pid, "cmd": describe(p.cmdline())} for p in procs]
        alive = sum(psutil.pid_exists(pid) for pid in pids.values())
    finally:
        sys_.stop()
    return {
        "config": config,
        "children": n,
        "children_alive_at_end": alive,
        "startup_s": round(startup, 3),
        "seconds": round(wall, 2),
        "cpu_s": round(cpu, 4),
        "cpu_percent": round(100 * cpu / wall, 3),
        "rss_mb_mean": round(sum(rss) / len(rss) / 2**20, 1),
        "rss_mb_peak": round(max(rss) / 2**20, 1),
        "pss_mb": round(sum(m.pss for m in full) / 2**20, 1),
        "uss_mb": round(sum(m.uss for m in full) / 2**20, 1),
        "processes": names,
    }


def bench_adopt(tmp: Path, child: str, n: int, kills: int) -> dict:
    sys_ = Corral(tmp / "adopt", child, n)
    sys_.start()
    try:
        pids = wait_all_running(sys_, 120 + n)
        wait_for(lambda: _all_running(sys_, pids), 60, "status: all RUNNING", 0.05)
        assert sys_.proc is not None
        sys_.proc.send_signal(signal.SIGKILL)
        sys_.proc.wait(10)
        time.sleep(0.5)  # nothing supervises now; the children keep running
        t0 = time.monotonic()
        sys_.start()
        first = wait_for(lambda: _answers(sys_), 30, "the new supervisor's socket", 0.002)
        t_first = first - t0
        t_all = wait_for(lambda: _all_running(sys_, pids), 30, "all adopted", 0.002) - t0
        same = {a: p for a, p in pids.items() if (read_pidfile(sys_.pidfile(a)) or (0,))[0] == p}
        rows = {r["agent"]: r for r in sys_.status()}
        restarted = sum(rows[a]["restarts"] for a in sys_.ids)
        replaced = [kill_and_time(sys_, a) * 1e3 for a in sys_.ids[:kills]]
    finally:
        sys_.stop()
    return {
        "children": n,
        "first_answer_s": round(t_first, 4),
        "all_watched_s": round(t_all, 4),
        "same_pids": len(same),
        "restarts_after_adoption": restarted,
        "adopted_kill_to_replacement_ms": percentiles(replaced),
    }


def _answers(sys_: Corral) -> float | None:
    try:
        sys_.status(timeout=1.0)
    except Exception:  # not listening yet
        return None
    return time.monotonic()


def _all_running(sys_: Corral, pids: dict[str, int]) -> float | None:
    try:
        rows = sys_.status(timeout=2.0)
    except Exception:  # not listening yet
        return None
    got = {r["agent"]: (r["state"], r["pid"]) for r in rows}
    ok = all(got.get(a) == ("RUNNING", p) for a, p in pids.items())
    return time.monotonic() if ok else None


# --- report -----------------------------------------------------------------------------


def targets(kill: dict[str, dict], idle: list[dict], adopt: dict | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    p50 = {k: v["ms"]["p50"] for k, v in kill.items()}
    if "corral" in p50 and "circus_0.01" in p50:
        r = p50["corral"] / p50["circus_0.01"]
        out["kill_corral_over_circus_0.01_p50"] = {
            "value": round(r, 3),
            "target": 0.5,
            "met": r <= 0.5,
        }
    if "corral" in p50 and "supervisord" in p50:
        r = p50["corral"] / p50["supervisord"]
        out["kill_corral_over_supervisord_p50"] = {
            "value": round(r, 4),
            "target": 0.1,
            "met": r < 0.1,
        }
    by = {(r["config"], r["children"]): r for r in idle}
    for n in sorted({r["children"] for r in idle}):
        c, s = by.get(("corral", n)), by.get(("supervisord", n))
        if c and s:
            out[f"idle_{n}_cpu_corral_minus_supervisord_s"] = {
                "value": round(c["cpu_s"] - s["cpu_s"], 4),
                "target": 0.0,
                "met": c["cpu_s"] <= s["cpu_s"],
            }
            r = c["rss_mb_mean"] / s["rss_mb_mean"]
            out[f"idle_{n}_rss_corral_over_supervisord"] = {
                "value": round(r, 3),
                "target": 1.5,
                "met": r <= 1.5,
            }
    if adopt is not None:
        out["adoption_all_watched_s"] = {
            "value": adopt["all_watched_s"],
            "target": 1.0,
            "met": adopt["all_watched_s"] < 1.0,
        }
    return out


def print_report(data: dict[str, Any]) -> None:
    print("\nKill -> replacement running (ms, to the child's first instruction)")
    rows = [
        [k, v["ms"]["n"], v["ms"]["p50"], v["ms"]["p90"], v["ms"]["max"]]
        for k, v in data["kill"].items()
    ]
    print(table(["system", "kills", "p50", "p90", "max"], rows))
    print("\nIdle: the supervisor's own processes")
    rows = [
        [
            r["config"],
            r["children"],
            r["seconds"],
            f"{r['cpu_s']:.3f}",
            f"{r['cpu_percent']:.3f}",
            r["rss_mb_mean"],
            r["rss_mb_peak"],
            r["pss_mb"],
            r["uss_mb"],
            len(r["processes"]),
        ]
        for r in data["idle"]
    ]
    heads = ["system", "children", "s", "CPU s", "CPU %", "RSS MB", "peak MB", "PSS MB", "USS MB"]
    print(table([*heads, "procs"], rows))
    a = data["adopt"]
    if a:
        first, watched = a["first_answer_s"] * 1e3, a["all_watched_s"] * 1e3
        print(
            f"\nAdoption of {a['children']} children: socket answers after {first:.0f} ms, "
            f"all watched after {watched:.0f} ms; {a['same_pids']} same pids, "
            f"{a['restarts_after_adoption']} restarts; an adopted child's kill -> replacement "
            f"p50 {a['adopted_kill_to_replacement_ms']['p50']:.1f} ms"
        )
    print("\nTargets")
    rows = [
        [k, v["value"], v["target"], "yes" if v["met"] else "NO"]
        for k, v in data["targets"].items()
    ]
    print(table(["target", "value", "limit", "met"], rows))


def _systems(value: str) -> list[str]:
    names = [v for v in value.split(",") if v]
    bad = [v for v in names if v not in SYSTEMS]
    if bad or not names:
        raise argparse.ArgumentTypeError(f"a comma-separated subset of {', '.join(SYSTEMS)}")
    return names


def _ints(value: str) -> list[int]:
    try:
        return [int(v) for v in value.split(",") if v]
    except ValueError:
        raise argparse.ArgumentTypeError("comma-separated integers") from None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--systems", type=_systems, default=list(SYSTEMS))
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--seconds", type=float, default=60.0, help="idle window per run")
    ap.add_argument("--warmup", type=float, default=5.0)
    ap.add_argument("--children", type=_ints, default=[13, 200], help="idle child counts")
    ap.add_argument("--adopt", type=int, default=200, help="children in the adoption test")
    ap.add_argument("--quick", action="store_true", help="a smoke run of a few seconds")
    ap.add_argument("--out", type=Path, default=RESULTS_DIR / "supervisor_bench.json")
    ap.add_argument("--seed", type=int, default=17)
    a = ap.parse_args()
    if a.quick:
        a.kills, a.seconds, a.warmup, a.children, a.adopt = 3, 2.0, 0.5, [4, 20], 20
    for name in ("supervisord", "circus"):
        if name in a.systems:
            try:
                __import__("supervisor" if name == "supervisord" else "circus")
            except ImportError:
                ap.error(f"--systems: {name} is not installed (pip install -e '.[bench]')")
    configs = [c for c, (s, _) in KILL_CONFIGS.items() if s in a.systems]
    rng = random.Random(a.seed)
    machine = machine_info()
    tmp = Path(tempfile.mkdtemp(prefix="corral-supbench-"))
    try:
        child = build_child(tmp)
        kill: dict[str, dict] = {}
        for config in configs:
            print(f"kill -> replacement: {config} ...", flush=True)
            kill[config] = bench_kills(tmp, child, config, a.kills, rng)
        idle = []
        for n in a.children:
            for config in configs:
                print(f"idle: {config}, {n} children ...", flush=True)
                idle.append(bench_idle(tmp, child, config, n, a.seconds, a.warmup))
        adopt = None
        if "corral" in a.systems:
            print(f"adoption: corral, {a.adopt} children ...", flush=True)
            adopt = bench_adopt(tmp, child, a.adopt, 3 if a.quick else 5)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    machine["loadavg_end"] = list(os.getloadavg())
    data = {
        "bench": "supervisor_bench",
        "machine": machine,
        "params": {
            "systems": a.systems,
            "kills": a.kills,
            "seconds": a.seconds,
            "warmup": a.warmup,
            "children": a.children,
            "adopt": a.adopt,
            "quick": a.quick,
            "kill_configs": configs,
            "versions": _versions(a.systems),
        },
        "kill": kill,
        "idle": idle,
        "adopt": adopt,
    }
    data["targets"] = targets(kill, idle, adopt)
    write_json(a.out, data)
    print_report(data)
    print(f"\nwrote {a.out}")
    return 0


def _versions(systems: list[str]) -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for s in systems:
        pkg = {"corral": "corral", "supervisord": "supervisor", "circus": "circus"}[s]
        try:
            out[s] = version(pkg)
        except PackageNotFoundError:
            out[s] = "?"
    return out


if __name__ == "__main__":
    sys.exit(main())
