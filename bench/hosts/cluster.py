"""The hosts themselves: a ``corral serve`` and a ``corral supervise`` (with its SDK
workers) per network namespace, the harness's PostgreSQL, and a proxy between each
host and PostgreSQL and between the harness and each host's server."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import psutil
import psycopg

from hosts import net
from hosts.pg import Postgres
from hosts.proxy import Proxy, ProxyLoop

__all__ = ["Host", "Hosts"]

HERE = Path(__file__).resolve().parent
SERVE_PORT = 7070
DB_PROXY_PORT = 15400  # + host index, on the gateway: the host's way to PostgreSQL
HTTP_PROXY_PORT = 15500  # + host index, on the gateway: the harness's way to its server
PG_PORT = 15432
TOKEN = "chaos-operator-token"

MANIFEST_HEAD = """[supervisor]
heartbeat_interval = {beat}
heartbeat_timeout = 15
backoff_base = 0.5
backoff_cap = 4
backoff_jitter = 0.2
restart_limit = 100000
restart_window = 60
"""

AGENT = """
[[agents]]
id = "{agent}"
cmd = "{python}"
args = ["{script}"]
heartbeat = "cluster"
restart = "always"
stop_timeout = 5
"""


def _base_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("CORRAL_", "CHAOS_"))}


class Host:
    """One host: namespace ``crl<i>``, its folder, its processes."""

    def __init__(self, hosts: Hosts, i: int) -> None:
        self.hosts = hosts
        self.i = i
        self.ns = net.netns(i)
        self.addr = net.host_addr(i)
        self.folder = hosts.folder / f"host{i}"
        self.folder.mkdir(parents=True, exist_ok=True)
        self.clock_file = self.folder / "clock_offset"
        self.clock_file.write_text("0\n")
        self.token_file = self.folder / "token"
        self.token_file.write_text(TOKEN + "\n")
        self.token_file.chmod(0o600)
        self.agents = [f"h{i}-w{j}" for j in range(hosts.workers)]
        self.serve: subprocess.Popen[bytes] | None = None
        self.supervise: subprocess.Popen[bytes] | None = None
        self.db_proxy = Proxy(
            hosts.loop, f"db{i}", (net.GATEWAY, DB_PROXY_PORT + i), (net.GATEWAY, PG_PORT)
        )
        self.http_proxy = Proxy(
            hosts.loop, f"http{i}", (net.GATEWAY, HTTP_PROXY_PORT + i), (self.addr, SERVE_PORT)
        )
        self.url = f"http://{net.GATEWAY}:{HTTP_PROXY_PORT + i}"  # its server, from the harness
        self.db_url = hosts.pg.url(port=DB_PROXY_PORT + i, addr=net.GATEWAY) + "?pool_size=4"
        self.partitioned = False

    def env(self) -> dict[str, str]:
        env = _base_env()
        env.update(
            CORRAL_TOKEN=TOKEN,
            CHAOS_SERVE=f"http://127.0.0.1:{SERVE_PORT}",
            CHAOS_BEAT=str(self.hosts.beat),
            LD_PRELOAD=str(self.hosts.clockstep),
            CORRAL_CLOCKSTEP_FILE=str(self.clock_file),
        )
        return env

    def _spawn(self, name: str, argv: list[str]) -> subprocess.Popen[bytes]:
        with (self.folder / f"{name}.log").open("ab") as log:
            return subprocess.Popen(
                ["ip", "netns", "exec", self.ns, *argv],
                env=self.env(),
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.folder,
                start_new_session=True,
            )

    def start_serve(self, wait: bool = True) -> None:
        self.serve = self._spawn(
            "serve",
            [
                sys.executable,
                "-m",
                "corral",
                "--url",
                self.db_url,
                "serve",
                "--host",
                "0.0.0.0",
                "--port",
                str(SERVE_PORT),
                "--token-file",
                str(self.token_file),
                "--log-level",
                "warning",
            ],
        )
        if wait:
            self.wait_healthy()

    def wait_healthy(self, deadline: float = 60.0) -> None:
        end = time.monotonic() + deadline
        while time.monotonic() < end:
            assert self.serve is not None
            if self.serve.poll() is not None:
                raise RuntimeError(
                    f"host {self.i}: corral serve exited: see {self.folder}/serve.log"
                )
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return
            time.sleep(0.1)
        raise RuntimeError(f"host {self.i}: corral serve did not become healthy")

    def write_manifest(self) -> Path:
        path = self.folder / "agents.toml"
        agents = "".join(
            AGENT.format(agent=a, python=sys.executable, script=HERE / "worker.py")
            for a in self.agents
        )
        path.write_text(MANIFEST_HEAD.format(beat=self.hosts.beat) + agents)
        return path

    def start_supervise(self) -> None:
        manifest = self.folder / "agents.toml"
        if not manifest.exists():
            manifest = self.write_manifest()
        self.supervise = self._spawn(
            "supervise",
            [
                sys.executable,
                "-m",
                "corral",
                "--url",
                f"http://127.0.0.1:{SERVE_PORT}",
                "supervise",
                str(manifest),
                "--state-dir",
                str(self.folder / "state"),
                "-q",
            ],
        )

    def alive(self, proc: subprocess.Popen[bytes] | None) -> bool:
        return proc is not None and proc.poll() is None

    def pids(self) -> list[int]:
        """Every process in this host's namespace."""
        out = subprocess.run(["ip", "netns", "pids", self.ns], capture_output=True, text=True)
        return [int(p) for p in out.stdout.split()]

    def agent_pids(self) -> dict[str, list[int]]:
        """Each agent's running worker processes (by the supervisor's
        ``CORRAL_AGENT_ID`` in their environment): more than one is an agent running twice."""
        found: dict[str, list[int]] = {a: [] for a in self.agents}
        for pid in self.pids():
            try:
                p = psutil.Process(pid)
                if p.status() == psutil.STATUS_ZOMBIE:
                    continue
                agent = p.environ().get("CORRAL_AGENT_ID")
                cmd = p.cmdline()
            except (psutil.Error, OSError):
                continue
            if agent in found and any(c.endswith("worker.py") for c in cmd):
                found[agent].append(pid)
        return found

    def set_clock(self, offset: float) -> None:
        self.clock_file.write_text(f"{offset}\n")

    def stop_all(self) -> None:
        """SIGKILL every process in the namespace (all of them this harness's)."""
        for pid in self.pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
                os.kill(pid, signal.SIGKILL)
        for proc in (self.serve, self.supervise):
            if proc is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(10)


class Hosts:
    """``n`` hosts, their PostgreSQL and proxies. ``up()`` builds and starts them,
    ``down()`` ends everything and removes the namespaces."""

    def __init__(self, n: int, folder: Path, *, workers: int = 2, beat: float = 2.0) -> None:
        self.n = n
        self.folder = folder
        self.workers = workers
        self.beat = beat
        self.pg = Postgres(net.GATEWAY, PG_PORT)
        self.clockstep = folder / "clockstep.so"
        self.loop: ProxyLoop | None = None  # type: ignore[assignment]
        self.hosts: list[Host] = []

    @property
    def admin_url(self) -> str:
        """The corral database, straight (no proxy): the harness's own checks."""
        return self.pg.url()

    def up(self, max_agents: int | None = None) -> None:
        net.check_permitted()
        net.up(self.n)
        subprocess.run(
            [
                "gcc",
                "-shared",
                "-fPIC",
                "-O2",
                "-o",
                str(self.clockstep),
                str(HERE / "clockstep.c"),
                "-ldl",
            ],
            check=True,
        )
        self.pg.init()
        self.pg.start()
        self.pg.create_db()
        self.loop = ProxyLoop()
        self.hosts = [Host(self, i) for i in range(self.n)]
        import corral

        admin = corral.connect(self.admin_url)
        try:
            admin.configure(max_agents=max_agents or self.n * self.workers)
        finally:
            admin.close()
        for h in self.hosts:
            h.start_serve(wait=False)
        for h in self.hosts:
            h.wait_healthy()
        for h in self.hosts:
            h.start_supervise()

    def leader(self) -> Host | None:
        """The host whose ``corral serve`` holds the monitor's advisory lock (from
        PostgreSQL's own lock table), or None."""
        with psycopg.connect(self.pg.url("corral"), autocommit=True, connect_timeout=3) as c:
            rows = c.execute(
                "SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a"
                " ON a.pid = l.pid WHERE l.locktype = 'advisory' AND l.granted"
                " AND a.application_name LIKE 'corral monitor %%'"
            ).fetchall()
        for (name,) in rows:
            pid = int(str(name).rsplit(":", 1)[1])
            for h in self.hosts:
                if h.serve is not None and h.serve.pid == pid:
                    return h
        return None

    def down(self) -> None:
        for h in self.hosts:
            with contextlib.suppress(Exception):
                net.heal(h.i)
            h.stop_all()
        for h in self.hosts:
            h.db_proxy.close()
            h.http_proxy.close()
        if self.loop is not None:
            self.loop.close()
        self.pg.stop()
        self.pg.remove()
        net.down(self.n)

    def info(self) -> dict[str, Any]:
        return {"hosts": self.n, "workers_per_host": self.workers, "beat_s": self.beat}
