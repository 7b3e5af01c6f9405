"""``corral supervise`` runs a manifest's agents; ``corral ctl`` talks to it.

    corral supervise fleet.toml [--state-dir DIR]
    corral ctl [--state-dir DIR] status [--json | --watch [--interval S]]
    corral ctl start|stop|restart ID
    corral ctl logs ID [-f] [--stderr] [-n LINES]
    corral ctl reopen | shutdown

``ctl``'s subcommands are built from the command registry
(``corral.supervisor.commands``): each sends one request over
``<state dir>/control.sock`` and prints the answer (``--json``: as JSON). ``logs``
reads ``<state dir>/logs/<agent>/stdout.log`` itself and, with ``-f``, follows it
across rotations, so it works whether or not a supervisor runs. Exit codes: 0 done,
1 refused, 2 bad input (unknown agent, bad manifest), 3 no supervisor listening.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import time
from pathlib import Path
from typing import Any

import click

from corral.cli._common import CONTEXT_SETTINGS, Seconds
from corral.errors import InvalidInputError, NotFoundError

__all__ = ["DEFAULT_STATE_DIR", "DRAWING_OPTIONS", "register"]

DEFAULT_STATE_DIR = ".corral/supervisor"
# A ctl subcommand's options of the CLI's own drawing, not sent to the supervisor.
DRAWING_OPTIONS = {"status": ("watch", "interval")}
_FOLLOW_INTERVAL = 0.2  # seconds between looks at a followed log file
_AGENT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")  # the manifest's id rule


# ---- corral supervise ---------------------------------------------------------------


@click.command(context_settings=CONTEXT_SETTINGS)
@click.argument("manifest", metavar="MANIFEST")
@click.option(
    "--state-dir",
    default=DEFAULT_STATE_DIR,
    show_default=True,
    metavar="DIR",
    help="pids.json, control.sock and logs/ live here (created with mode 0700).",
)
@click.option("-q", "--quiet", is_flag=True, help="Print warnings only (UNHEALTHY, gave up).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON objects, one per line.")
@click.pass_context
def supervise(
    ctx: click.Context, manifest: str, state_dir: str, quiet: bool, as_json: bool
) -> None:
    """Run the agents of MANIFEST (TOML, or an agents.json) in the foreground.

    Starts them in dependency order, restarts them by their policies, and answers
    `corral ctl` on STATE_DIR/control.sock. SIGTERM or SIGINT stops every agent in
    reverse dependency order. A supervisor started again over the same state dir
    adopts the agents still running instead of restarting them. Prints a
    timestamped line on stderr per state change (as state.log records it); `corral
    ctl status --watch` shows the processes table live.
    """
    output = "json" if as_json else "quiet" if quiet else "text"
    from corral.supervisor import entry

    spec = entry.load(manifest)  # a bad manifest: exit 2 before anything starts
    if output == "text" and sys.stderr.isatty():
        # The state lines follow; the table of them is another process's to draw (this
        # one stays lean: tests/integration/test_supervisor_lean.py).
        where = "" if state_dir == DEFAULT_STATE_DIR else f" --state-dir {state_dir}"
        click.echo(f"the processes table: corral ctl{where} status --watch", err=True)
    url = (ctx.find_root().obj or {}).get("url")
    if url is None and _is_the_corral_program():
        # The supervisor stays up for as long as its agents: it continues in a
        # leaner interpreter (same pid; see corral.supervisor.entry).
        from corral.supervisor import boot

        sys.stdout.flush()
        sys.stderr.flush()
        argv = boot.argv(
            "corral.supervisor.entry:main",
            "corral-supervise",
            manifest,
            state_dir,
            output,
            same_flags=True,
        )
        os.execv(argv[0], argv)
    client = None
    if url:
        from corral.client import connect

        client = connect(url)
        ctx.call_on_close(client.close)
    entry.serve(spec, Path(state_dir), client, output)


def _is_the_corral_program() -> bool:
    """Whether this process is the ``corral`` command itself (the console script or
    ``python -m corral``), not a program that called the CLI in-process (a test's
    runner), which must not be replaced by ``execv``."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name == "corral.__main__":
        return True
    cli = sys.modules.get("corral.cli")
    ours = cli is not None and getattr(main, "main", None) is getattr(cli, "main", False)
    return ours and os.path.basename(sys.argv[0]) == "corral"


# ---- corral ctl ---------------------------------------------------------------------


@click.group(context_settings=CONTEXT_SETTINGS)
@click.option(
    "--state-dir",
    default=DEFAULT_STATE_DIR,
    show_default=True,
    envvar="CORRAL_SUPERVISOR",
    metavar="DIR",
    help="The supervisor's state dir (env CORRAL_SUPERVISOR, which every supervised "
    "agent has, so `corral ctl` run by an agent reaches its own supervisor).",
)
@click.pass_context
def ctl(ctx: click.Context, state_dir: str) -> None:
    """Control a running `corral supervise` (exit 3 when none listens)."""
    ctx.ensure_object(dict)
    ctx.obj["state_dir"] = Path(state_dir)


def _state_dir(ctx: click.Context) -> Path:
    obj = ctx.find_object(dict)
    if obj is None:  # pragma: no cover - ctl always sets it
        raise click.UsageError("corral ctl: no state dir")
    found: Path = obj["state_dir"]
    return found


def _rows(rows: list[dict[str, Any]], now: float) -> list[Any]:
    from corral import cockpit

    return [cockpit.process_row(r, now) for r in rows]


def status_table(rows: list[dict[str, Any]], now: float | None = None) -> str:
    """The processes table as plain text (what ``corral ctl status`` prints when its
    output is not a terminal): the same table ``corral top``'s Processes panel and
    ``corral status`` draw (``corral.cli._tables.processes_table``), then one line
    per agent with flags, what it waits on or a last exit worth knowing."""
    from corral.cli import _tables

    now = time.time() if now is None else now
    return _tables.to_text(_tables.processes_table(_rows(rows, now)))


def _print_status(rows: list[dict[str, Any]]) -> None:
    from corral.cli import _tables

    _tables.show(_tables.processes_table(_rows(rows, time.time())))


def _watch(sock: Path, interval: float) -> None:
    """``ctl status --watch``: the table again every ``interval`` seconds until
    interrupted, in place on a terminal (rich.live); otherwise printed again, with the
    time, whenever an agent's state, pid, restarts or flags changed."""
    from corral.cli import _tables
    from corral.supervisor.control import request

    def table() -> tuple[Any, list[tuple[Any, ...]]]:
        rows = request(sock, "status")
        key = [
            (
                r.get("agent"),
                r.get("state"),
                r.get("pid"),
                r.get("restarts"),
                tuple(r.get("flags") or ()),
            )
            for r in rows
        ]
        return _tables.processes_table(_rows(rows, time.time())), key

    # Ctrl-C (SIGINT) ends the watch with status 0, as corral's other long-running
    # commands handle it themselves: also when it was started with SIGINT ignored (a
    # shell's background job, nohup), whose disposition Python would keep.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        if sys.stdout.isatty():
            from rich.live import Live

            with Live(table()[0], auto_refresh=False) as live:
                while True:
                    time.sleep(interval)
                    live.update(table()[0], refresh=True)
        last: list[tuple[Any, ...]] | None = None
        while True:
            shown, key = table()
            if key != last:
                click.echo(time.strftime("%H:%M:%S"))
                _tables.show(shown)
                last = key
            time.sleep(interval)
    except KeyboardInterrupt:
        return


def _agent_line(verb: str) -> Any:
    def text(row: dict[str, Any]) -> str:
        pid = f" (pid {row['pid']})" if row.get("pid") else ""
        return f"{verb} {row.get('agent')}: {row.get('state')}{pid}"

    return text


_TEXT: dict[str, Any] = {
    "start": _agent_line("started"),
    "stop": _agent_line("stopped"),
    "restart": _agent_line("restarted"),
    "reopen": lambda _r: "reopened the log files",
    "shutdown": lambda _r: "supervisor shut down",
    "requests": lambda rows: "\n".join(_request_line(r) for r in rows) or "no spawn requests",
    "accept": lambda r: _request_line(r),
    "decline": lambda r: _request_line(r),
}


def _request_line(r: dict[str, Any]) -> str:
    """``3  dev  developer  pending  (spawn_developer: 5 pending tasks, ...)``: a
    pending request says why its pool asked."""
    who = f" by {r['decided_by']}" if r.get("decided_by") else ""
    member = f" -> {r['member']}" if r.get("member") else ""
    why = f"  ({r['reason']})" if r.get("status") == "pending" and r.get("reason") else ""
    line = f"{r.get('id')}  {r.get('pool')}  {r.get('role')}  {r.get('status')}{who}{member}"
    return line + why


def _make_command(cmd: Any) -> click.Command:
    """A ``corral ctl`` subcommand for registry entry ``cmd``."""
    params: list[click.Parameter] = []
    for a in cmd.args:
        if a.required:
            params.append(click.Argument([a.name], type=a.type, metavar=a.name.upper()))
        elif a.type is bool:
            params.append(click.Option([f"--{a.name.replace('_', '-')}", a.name], is_flag=True))
        else:
            params.append(click.Option([f"--{a.name.replace('_', '-')}", a.name], type=a.type))
    params.append(click.Option(["--json", "as_json"], is_flag=True, help="Print JSON."))
    if cmd.name == "status":
        params += [
            click.Option(
                ["--watch", "watch"],
                is_flag=True,
                help="Show the table again every --interval seconds until interrupted.",
            ),
            click.Option(
                ["--interval", "interval"],
                type=Seconds(),
                default=1.0,
                show_default=True,
                help="Seconds between two looks with --watch.",
            ),
        ]

    def callback(as_json: bool, watch: bool = False, interval: float = 1.0, **args: Any) -> None:
        from corral.supervisor.control import request

        ctx = click.get_current_context()
        sock = _state_dir(ctx) / "control.sock"
        if watch:
            if as_json:
                raise click.UsageError("--watch draws the table: it takes no --json")
            _watch(sock, interval)
            return
        given = {k: v for k, v in args.items() if v is not None}
        result = request(sock, cmd.name, **given)
        if as_json:
            click.echo(json.dumps(result, indent=2, ensure_ascii=False, default=str))
        elif cmd.name == "status":
            _print_status(result)
        else:
            click.echo(_TEXT.get(cmd.name, lambda r: json.dumps(r, default=str))(result))

    return click.Command(
        cmd.name,
        params=params,
        callback=callback,
        help=cmd.doc,
        short_help=cmd.summary,
        context_settings=CONTEXT_SETTINGS,
    )


@click.command("logs", context_settings=CONTEXT_SETTINGS)
@click.argument("agent_id", metavar="ID")
@click.option("-f", "--follow", is_flag=True, help="Keep printing new lines (across rotations).")
@click.option("--stderr", "use_stderr", is_flag=True, help="The agent's stderr.log.")
@click.option(
    "-n",
    "--lines",
    default=20,
    show_default=True,
    type=click.IntRange(min=0),
    help="How many of the last lines to print first.",
)
@click.pass_context
def logs(ctx: click.Context, agent_id: str, follow: bool, use_stderr: bool, lines: int) -> None:
    """Print an agent's log (stdout.log, or stderr.log with --stderr).

    Reads STATE_DIR/logs/ID/ directly, so it works while no supervisor runs; with -f
    it follows the file across rotations until interrupted.
    """
    if not _AGENT_ID.fullmatch(agent_id):
        raise InvalidInputError("not an agent id", field="id")
    path = _state_dir(ctx) / "logs" / agent_id / ("stderr.log" if use_stderr else "stdout.log")
    try:
        f = open(path, "rb")  # noqa: SIM115 (kept open while following)
    except FileNotFoundError:
        raise NotFoundError(f"no log for agent {agent_id} at {path}", field="id") from None
    if not follow:
        with f:
            _write(_last_lines(f, lines))
        return
    _write(_last_lines(f, lines))
    _follow(f, path)


def _write(data: bytes) -> None:
    if data:
        out = sys.stdout.buffer
        out.write(data)
        out.flush()


def _last_lines(f: Any, n: int) -> bytes:
    """The last ``n`` lines of ``f``, leaving it positioned at its end."""
    end = f.seek(0, os.SEEK_END)
    if n == 0:
        return b""
    pos, buf = end, b""
    while pos > 0 and buf.count(b"\n") <= n:
        step = min(65536, pos)
        pos -= step
        f.seek(pos)
        buf = f.read(step) + buf
    f.seek(end)
    kept = buf.splitlines(keepends=True)[-n:]
    return b"".join(kept)


def _follow(f: Any, path: Path) -> None:
    """Print what is appended to ``path`` until interrupted. When the writer rotates
    (``path`` now names another file), finish the old file, then every newer rotated
    file in order (a writer may rotate more than once between two looks), then read
    the new ``path`` from its start: no line is skipped unless the writer dropped a
    whole file (past ``log_keep``) before it was read."""
    try:
        while True:
            data = f.read()
            if data:
                _write(data)
                continue
            try:
                st = os.stat(path)
            except FileNotFoundError:
                time.sleep(_FOLLOW_INTERVAL)  # between the rename and the new file
                continue
            if st.st_ino != os.fstat(f.fileno()).st_ino:
                newer = _newer_files(path, os.fstat(f.fileno()).st_ino)
                if newer is None:
                    time.sleep(_FOLLOW_INTERVAL / 10)  # mid-rotation: look again
                    continue
                _write(f.read())  # lines written just before the rotation
                f.close()
                f = newer.pop()  # the current file, read from its start
                for g in newer:
                    _write(g.read())
                    g.close()
                continue
            if st.st_size < f.tell():
                f.seek(0)  # truncated by someone else: start over
                continue
            time.sleep(_FOLLOW_INTERVAL)
    finally:
        f.close()


def _rotated(path: Path) -> list[Path] | None:
    """``path``'s rotated files, oldest (highest number) first, then ``path``; ``None``
    when the numbers have a gap (a rotation is renaming them right now)."""
    pattern = re.compile(re.escape(path.name) + r"\.([1-9][0-9]*)")
    numbers = sorted(
        int(m.group(1)) for entry in os.listdir(path.parent) if (m := pattern.fullmatch(entry))
    )
    if numbers != list(range(1, len(numbers) + 1)):
        return None
    return [path.with_name(f"{path.name}.{k}") for k in reversed(numbers)] + [path]


def _newer_files(path: Path, old_ino: int) -> list[Any] | None:
    """The files written after the one with inode ``old_ino``, oldest first, open and
    positioned at their start, the last being ``path`` itself; ``None`` if a rotation
    happened while looking (the caller looks again)."""
    names = _rotated(path)
    if names is None:
        return None
    files: list[Any] = []
    try:
        for name in names:
            files.append(open(name, "rb"))  # noqa: SIM115
        inodes = [os.fstat(g.fileno()).st_ino for g in files]
        if _rotated(path) != names or [os.stat(n).st_ino for n in names] != inodes:
            raise FileNotFoundError  # renamed under us
    except FileNotFoundError:
        for g in files:
            g.close()
        return None
    # Not found: the old file was dropped (past log_keep), so every file is newer.
    cut = inodes.index(old_ino) + 1 if old_ino in inodes else 0
    for g in files[:cut]:
        g.close()
    return files[cut:]


def ctl_group() -> click.Group:
    """``corral ctl`` with a subcommand per registry command plus the client ones."""
    from corral.supervisor.commands import CLIENT_COMMANDS, COMMANDS

    for cmd in COMMANDS:
        ctl.add_command(_make_command(cmd))
    local = {"logs": logs}
    assert set(local) == set(CLIENT_COMMANDS), "every client command needs its click command"
    for c in local.values():
        ctl.add_command(c)
    return ctl


def register(group: click.Group) -> None:
    group.add_command(supervise)
    group.add_command(ctl_group())
