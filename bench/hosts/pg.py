"""The harness's own PostgreSQL cluster: ``initdb`` into a temporary folder, its own
port, listening on the bridge's address only, run as the ``postgres`` user (initdb
refuses root). Restarting it touches nothing else on the machine."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg

__all__ = ["Postgres"]

BIN = Path("/usr/lib/postgresql/15/bin")


def _as_postgres(*argv: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        ["runuser", "-u", "postgres", "--", *argv], capture_output=True, text=True
    )
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: exit {done.returncode}: {done.stderr.strip()}")
    return done


class Postgres:
    """The cluster lives in a folder of its own under the system's temporary folder
    (the ``postgres`` user must reach it: a test's ``tmp_path`` is root's, mode 0700);
    ``remove()`` deletes it."""

    def __init__(self, addr: str, port: int) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="corral-hosts-pg-"))
        self.data = self.folder / "pgdata"
        self.addr = addr
        self.port = port
        self.log = self.folder / "postgres.log"
        self.restarts = 0

    def url(self, db: str = "corral", port: int | None = None, addr: str | None = None) -> str:
        return f"postgresql://postgres@{addr or self.addr}:{port or self.port}/{db}"

    def init(self) -> None:
        if not (BIN / "initdb").exists():
            raise RuntimeError(
                f"PostgreSQL 15's initdb is missing at {BIN} (apt-get install postgresql-15)"
            )
        folder = self.folder
        shutil.chown(folder, "postgres", "postgres")
        _as_postgres(str(BIN / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres")
        conf = self.data / "postgresql.conf"
        with conf.open("a") as f:
            f.write(
                f"listen_addresses = '{self.addr}'\nport = {self.port}\n"
                f"unix_socket_directories = '{folder}'\nmax_connections = 300\n"
                # the dead-peer bound the proxies keep too (bench/hosts/proxy.py)
                "tcp_keepalives_idle = 10\ntcp_keepalives_interval = 2\n"
                "tcp_keepalives_count = 3\ntcp_user_timeout = 16000\n"
                "shared_buffers = 64MB\nfsync = on\nsynchronous_commit = on\n"
            )
        with (self.data / "pg_hba.conf").open("a") as f:
            f.write("host all all 10.231.0.0/24 trust\n")

    def start(self) -> None:
        _as_postgres(
            str(BIN / "pg_ctl"),
            "-D",
            str(self.data),
            "-l",
            str(self.log),
            "-w",
            "-t",
            "60",
            "start",
        )

    def stop(self) -> None:
        subprocess.run(
            [
                "runuser",
                "-u",
                "postgres",
                "--",
                str(BIN / "pg_ctl"),
                "-D",
                str(self.data),
                "-m",
                "fast",
                "-w",
                "stop",
            ],
            capture_output=True,
            check=False,
        )

    def remove(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)

    def restart(self) -> float:
        """A fast-mode restart (every session ended, then the server back): the seconds
        it was down."""
        began = time.monotonic()
        _as_postgres(
            str(BIN / "pg_ctl"),
            "-D",
            str(self.data),
            "-l",
            str(self.log),
            "-m",
            "fast",
            "-w",
            "-t",
            "60",
            "restart",
        )
        self.restarts += 1
        return time.monotonic() - began

    def create_db(self, name: str = "corral") -> None:
        with psycopg.connect(self.url("postgres"), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')

    def terminate_all(self, db: str = "corral") -> int:
        """``pg_terminate_backend`` of every session of ``db``: how many."""
        with psycopg.connect(self.url("postgres"), autocommit=True, connect_timeout=5) as conn:
            rows = conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = %s AND pid <> pg_backend_pid()",
                [db],
            ).fetchall()
        return len(rows)
