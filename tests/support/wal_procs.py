"""Readers and openers from other processes, for the SQLite store's cross-process
promise: a write a corral process acknowledged is in the file, for any new reader,
whatever other processes open and close meanwhile.

``FreshReader`` is a process of its own that answers each query on a new connection,
closed after it (as a new reader would). ``open_and_close`` is one of the three
ordinary ways another process opens and closes the database (the CLI, an embedded
client, the ``sqlite3`` shell). ``Workload`` makes mixed writes through any client,
remembers what each acknowledged write left in the file, and checks it there through
a ``FreshReader``. Used by tests/integration/test_wal_cross_process.py and
bench/wal_cross_process.py."""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from tests.support.fleet_up import corral_cmd, env, wait_for

TRIGGERS = ("cli", "embedded", "sqlite3")
VISIBLE_WITHIN = 0.1  # seconds from an acknowledgement to a new reader seeing it

_READER = r"""
import json, sqlite3, sys
db = sys.argv[1]
for line in sys.stdin:
    conn = sqlite3.connect(db, timeout=5)
    try:
        rows = conn.execute(json.loads(line)).fetchall()
        out = {"rows": rows}
    except sqlite3.Error as exc:
        out = {"error": str(exc)}
    finally:
        conn.close()
    print(json.dumps(out), flush=True)
"""

_EMBEDDED_OPEN_CLOSE = """
import sys, corral
c = corral.connect(sys.argv[1])
c.list_tasks()
c.close()
"""


class FreshReader:
    """A process that runs each query on a connection of its own, opened for the
    query and closed after it: what any new reader of the file sees."""

    def __init__(self, db: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _READER, str(db)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def rows(self, sql: str) -> list[list[Any]]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(sql) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise AssertionError(f"the reader exited ({self.proc.poll()})")
        out = json.loads(line)
        if "error" in out:
            raise AssertionError(f"the reader's query failed: {out['error']} ({sql})")
        rows: list[list[Any]] = out["rows"]
        return rows

    def close(self) -> None:
        for f in (self.proc.stdin, self.proc.stdout):
            if f is not None:
                f.close()
        self.proc.wait(10)


def open_and_close(kind: str, db: Path) -> None:
    """Open and close the database once from a new process, as ``kind`` does."""
    url = f"sqlite:///{db}"
    if kind == "cli":
        cmd = corral_cmd("--url", url, "status")
    elif kind == "embedded":
        cmd = [sys.executable, "-c", _EMBEDDED_OPEN_CLOSE, url]
    elif kind == "sqlite3":
        shell = shutil.which("sqlite3")
        assert shell is not None, "the sqlite3 shell is not installed (scripts/test installs it)"
        cmd = [shell, str(db), "SELECT count(*) FROM tasks;"]
    else:
        raise ValueError(kind)
    done = subprocess.run(cmd, env=env(), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"{kind}: exit {done.returncode}: {done.stderr[-500:]}"


def side_files(db: Path) -> dict[str, bool]:
    return {s: Path(f"{db}{s}").exists() for s in ("-wal", "-shm")}


@dataclass
class Workload:
    """Mixed writes through ``client`` (HTTP or embedded), each checked in the file.

    ``expected`` maps each task and node a write touched to a SQL query and the rows it
    must return once that write is acknowledged (the task added, claimed, completed or
    failed; the node registered or heartbeat). A later write of the same task or node
    replaces its entry, so after the run ``expected`` is the file's whole state as the
    acknowledgements tell it."""

    client: Any
    seed: int = 0
    nodes: list[str] = field(default_factory=list)
    expected: dict[str, tuple[str, list[list[Any]]]] = field(default_factory=dict)
    acked: int = 0
    _held: list[tuple[str, Any]] = field(default_factory=list)  # (node, task) claimed
    _beats: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    def step(self) -> str:
        """One acknowledged write; the key of what it set in ``expected``."""
        r = self.rng.random()
        if not self.nodes or (r < 0.05 and len(self.nodes) < 4):
            node = f"wal-node-{len(self.nodes) + 1}"
            self.client.register_node(node, "developer", heartbeat_interval=3600)
            self.nodes.append(node)
            return self._set_node(node)
        if r < 0.40:
            t = self.client.add_task(f"write {self.acked} of seed {self.seed}", priority="high")
            return self._set_task(t.id, "pending", 0)
        if r < 0.60 and len(self._held) < 6:
            node = self.rng.choice(self.nodes)
            t = self.client.claim_best_task(node, "developer")
            if t is None:
                t = self.client.add_task(f"write {self.acked} of seed {self.seed}")
                return self._set_task(t.id, "pending", 0)
            self._held.append((node, t))
            return self._set_task(t.id, "in_progress", t.epoch)
        if r < 0.80 and self._held:
            node, t = self._held.pop(self.rng.randrange(len(self._held)))
            if self.rng.random() < 0.8:
                self.client.complete_task(t.id, node, epoch=t.epoch, result={"n": self.acked})
                return self._set_task(t.id, "done", t.epoch)
            self.client.fail_task(t.id, node, epoch=t.epoch, error=f"failure {self.acked}")
            return self._task_failed(t.id, t.epoch)
        node = self.rng.choice(self.nodes)
        beat = self._beats.get(node, 0) + 1
        self.client.heartbeat(node, metrics={"beat": beat})
        self._beats[node] = beat
        return self._set_node(node)

    def _set_task(self, task_id: int, status: str, epoch: int) -> str:
        self.acked += 1
        q = f"SELECT status, epoch FROM tasks WHERE id = {int(task_id)}"
        return self._expect(f"task {task_id}", q, [[status, epoch]])

    def _task_failed(self, task_id: int, epoch: int) -> str:
        # A failed attempt goes back to pending (or to failed at its last attempt);
        # the epoch stays the failed claim's until the next claim.
        self.acked += 1
        q = (
            f"SELECT status IN ('pending', 'failed'), epoch, error FROM tasks"
            f" WHERE id = {int(task_id)}"
        )
        return self._expect(f"task {task_id}", q, [[1, epoch, f"failure {self.acked - 1}"]])

    def _set_node(self, node: str) -> str:
        self.acked += 1
        beat = self._beats.get(node)
        q = (
            "SELECT terminated_at IS NULL, json_extract(heartbeat, '$.metrics.beat')"
            f" FROM nodes WHERE id = '{node}' ORDER BY incarnation DESC LIMIT 1"
        )
        return self._expect(f"node {node}", q, [[1, beat]])

    def _expect(self, key: str, query: str, rows: list[list[Any]]) -> str:
        self.expected[key] = (query, rows)
        return key


def wait_visible(
    reader: FreshReader, query: str, want: list[list[Any]], acked_at: float
) -> float | str:
    """Seconds from ``acked_at`` until a new reader saw ``want``; what it saw instead
    when it did not within ``VISIBLE_WITHIN``."""
    while True:
        got = reader.rows(query)
        now = time.monotonic()
        if got == want:
            return now - acked_at
        if now - acked_at > VISIBLE_WITHIN:
            return f"{query} -> {got} {now - acked_at:.3f} s after, expected {want}"
        time.sleep(0.002)


def missing(reader: FreshReader, expected: dict[str, tuple[str, list[list[Any]]]]) -> list[str]:
    """The acknowledged states a new reader does not find in the file."""
    return [
        f"{q} -> {got}, expected {want}"
        for q, want in expected.values()
        if (got := reader.rows(q)) != want
    ]


@dataclass
class Run:
    """What one run of writes and openings saw."""

    acked: int = 0
    openings: int = 0
    slowest: float = 0.0  # seconds from an acknowledgement to a new reader seeing it
    invisible: list[str] = field(default_factory=list)  # not seen within VISIBLE_WITHIN
    side_files_gone: list[str] = field(default_factory=list)


def interleave(
    workload: Workload,
    reader: FreshReader,
    db: Path,
    writes: int,
    openings: int,
    triggers: tuple[str, ...] = TRIGGERS,
    alive: Callable[[], bool] = lambda: True,
) -> Run:
    """``writes`` acknowledged writes with ``openings`` open-and-close of the file by
    other processes spread among them (``triggers`` in turn); each write must be seen
    by a new reader within ``VISIBLE_WITHIN`` of its acknowledgement, and the WAL and
    shared-memory files must be there after each opening (what was not is in the
    returned ``Run``)."""
    run = Run()
    every = max(1, writes // max(openings, 1))
    for i in range(writes):
        if run.openings < openings and i % every == every // 2:
            open_and_close(triggers[run.openings % len(triggers)], db)
            run.openings += 1
            files = side_files(db)
            if not all(files.values()):
                run.side_files_gone.append(f"after opening {run.openings}: {files}")
            assert alive(), "the corral process under test exited"
        key = workload.step()
        acked_at = time.monotonic()
        query, rows = workload.expected[key]
        seen = wait_visible(reader, query, rows, acked_at)
        if isinstance(seen, str):
            run.invisible.append(seen)
        else:
            run.slowest = max(run.slowest, seen)
    run.acked = workload.acked
    return run


# --- the corral processes under test -------------------------------------------------


class Served:
    """``corral --url sqlite:///DB serve`` on a free port, with its own token."""

    TOKEN = "wal-test-operator-token-0123456789"

    def __init__(self, db: Path, port: int, **extra_env: str) -> None:
        self.db = db
        self.http = f"http://127.0.0.1:{port}"
        self.log = db.parent / f"{db.name}.serve.log"
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen(
                corral_cmd("--url", f"sqlite:///{db}", "serve", "--port", str(port)),
                env=env(CORRAL_TOKEN=self.TOKEN, **extra_env),
                stdout=subprocess.DEVNULL,
                stderr=log,
            )
        self.client = _http_client(self.http, self.TOKEN, self.proc, self.log)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, sig: int) -> int:
        """Send ``sig`` and wait for the server's exit; its status."""
        self.client.close()
        self.proc.send_signal(sig)
        return self.proc.wait(30)

    def kill(self) -> None:
        self.client.close()
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)


_FLEET = """
[cluster]
settings = { max_agents = 20 }

[supervisor]
heartbeat_interval = 1
heartbeat_timeout = 5
stop_timeout = 5

[[agents]]
id = "relay"
cmd = "python3"
args = ["relay.py"]
cwd = "."
heartbeat = "pipe"
restart = "always"
"""


class Upped:
    """``corral up`` of a one-agent fleet (no pool: the test's writes are the only
    ones) in ``directory``, on the embedded store it makes there."""

    def __init__(self, directory: Path) -> None:
        from tests.support.fleet_up import EXAMPLES

        self.directory = directory
        shutil.copy(EXAMPLES / "relay.py", directory / "relay.py")
        (directory / "fleet.toml").write_text(_FLEET)
        self.db = directory / ".corral" / "corral.db"
        self.proc = subprocess.Popen(
            corral_cmd("up", "fleet.toml", "--port", "0", "--json"),
            cwd=directory,
            env=env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
        )
        self._lines: list[dict[str, Any]] = []
        self._out = threading.Thread(target=self._read, daemon=True)
        self._out.start()
        try:
            banner = wait_for(self._banner, 60, "corral up's banner")
            token = (directory / banner["token_file"]).read_text().strip()
            self.client = _http_client(banner["http"], token, self.proc, None)
        except BaseException:
            self._kill_all()
            raise

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with contextlib.suppress(ValueError):
                self._lines.append(json.loads(line))

    def _banner(self) -> dict[str, Any] | None:
        if self.proc.poll() is not None:
            raise AssertionError(f"corral up exited {self.proc.returncode}")
        return next((x for x in self._lines if x.get("event") == "up"), None)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        """``kill -9`` of corral up, then of what it leaves running by design (its
        agents and their log daemon, in sessions of their own, which a next start
        would adopt): nothing of the run is left behind."""
        self.client.close()
        self._kill_all()

    def _kill_all(self) -> None:
        from tests.support.fleet_up import marked

        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)
        left = marked(self.directory)
        for p in left:
            with contextlib.suppress(psutil.Error):
                p.kill()
        psutil.wait_procs(left, timeout=10)
        self._out.join(5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def _http_client(base: str, token: str, proc: subprocess.Popen[Any], log: Path | None) -> Any:
    import corral

    client = corral.connect(base, token=token)

    def healthy() -> bool:
        if proc.poll() is not None:
            err = log.read_text() if log is not None else ""
            raise AssertionError(f"the server exited {proc.returncode}: {err[-2000:]}")
        try:
            client.settings()
        except Exception:  # not listening yet
            return False
        return True

    wait_for(healthy, 60, f"{base} to answer")
    return client


_EMBEDDED_WRITER = r"""
import json, sys
import corral
from corral.model import Task

url = sys.argv[1]
client = corral.connect(url)
# A program that opens a second client of the same file (a worker's SDK beside a
# runner, a status read) while its first is open: both live on in this process.
second = corral.connect(url)
second.list_tasks()
print(json.dumps({"ready": True}), flush=True)
for line in sys.stdin:
    name, args, kwargs = json.loads(line)
    out = getattr(client, name)(*args, **kwargs)
    if isinstance(out, Task):
        out = {"task": True, "id": out.id, "epoch": out.epoch}
    elif out is not None:
        out = {"task": False}
    print(json.dumps(out), flush=True)
"""


class EmbeddedWriter:
    """A long-lived process that writes through ``corral.connect(sqlite:///…)`` on
    request, and acknowledges each write once its call returned. It opens a second
    client of the same file beside its first, as a program may."""

    def __init__(self, db: Path) -> None:
        self.db = db
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _EMBEDDED_WRITER, f"sqlite:///{db}"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env(),
            text=True,
        )
        assert self._answer() == {"ready": True}
        self.client = _Remote(self)

    def _answer(self) -> Any:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise AssertionError(f"the embedded writer exited {self.proc.poll()}")
        return json.loads(line)

    def call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps([name, args, kwargs]) + "\n")
        self.proc.stdin.flush()
        return self._answer()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        for f in (self.proc.stdin, self.proc.stdout):
            if f is not None:
                with contextlib.suppress(OSError):
                    f.close()


@dataclass
class _TaskAck:
    id: int
    epoch: int


class _Remote:
    """The client methods ``Workload`` calls, made in the embedded writer's process."""

    def __init__(self, writer: EmbeddedWriter) -> None:
        self._writer = writer

    def __getattr__(self, name: str) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            out = self._writer.call(name, *args, **kwargs)
            return _TaskAck(out["id"], out["epoch"]) if out and out.get("task") else out

        return call
