"""``corral task import FILE``: put a file's tasks on the board in batches.

    corral task import tasks.jsonl|tasks.csv [--batch-size N] [--json]

A JSON Lines file has one object per line; a CSV file a header row naming the
columns. Either way each task has ``add_task``'s arguments (title, description,
priority, role, max_attempts), checked line by line with ``add_task``'s own rules
(its ``Cluster`` method's, ``corral.validation``) and the cluster's roles; the lines
that pass go in through ``add_tasks``, ``--batch-size`` at a time, and the summary
names each refused line with the rule's message. A progress bar on a terminal, a
line per batch otherwise. Exit codes: 0 every line went in; 1 some lines were
refused (the others went in) or a batch was refused (the summary says exactly which
lines went in before it); 2 a file that cannot be read as tasks (nothing went in);
3 the store is unavailable.
"""

from __future__ import annotations

import csv
import inspect
import io
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from corral.cli._common import CONTEXT_SETTINGS, client
from corral.errors import CorralError, InvalidInputError
from corral.types import Client
from corral.validation import check_choice

__all__ = ["Import", "read_lines", "register"]

MAX_BATCH = 100_000  # add_tasks' own bound


def _fields() -> tuple[str, ...]:
    """``add_task``'s arguments, the keys a line may have."""
    from corral.cluster import Cluster

    params = list(inspect.signature(Cluster.add_task).parameters)[1:]
    return tuple(params)


def _bad_file(path: Path, why: str) -> InvalidInputError:
    return InvalidInputError(f"{path}: {why}", field="file")


def read_lines(path: Path) -> Iterator[tuple[int, dict[str, Any] | str]]:
    """``(line number, task arguments)`` per task in the file, or ``(line number,
    why)`` for a line that is not a task (not JSON, not an object). A file that
    cannot be read as tasks raises ``InvalidInputError`` naming it (field ``file``)."""
    kind = path.suffix.lower()
    if kind not in (".jsonl", ".ndjson", ".csv"):
        raise _bad_file(path, "not a .jsonl or .csv file")
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise _bad_file(path, f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise _bad_file(path, f"cannot read it: {exc.strerror}") from None
    if kind == ".csv":
        yield from _csv_lines(path, text)
        return
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except ValueError as exc:
            yield n, f"not JSON: {exc}"
            continue
        yield (n, item) if isinstance(item, dict) else (n, "not a JSON object")


def _csv_lines(path: Path, text: str) -> Iterator[tuple[int, dict[str, Any] | str]]:
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = next(reader)
    except StopIteration:
        raise _bad_file(path, "empty (a CSV file's first row names its columns)") from None
    except csv.Error as exc:
        raise _bad_file(path, f"line 1: {exc}") from None
    names = [h.strip() for h in header]
    known = _fields()
    unknown = [h for h in names if h not in known]
    if unknown or "title" not in names or len(set(names)) != len(names):
        why = (
            f"unknown columns {unknown}"
            if unknown
            else "no title column"
            if "title" not in names
            else "a column named twice"
        )
        raise _bad_file(path, f"{why}: the header names the columns, of {', '.join(known)}")
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            yield reader.line_num, f"not CSV: {exc}"
            continue
        if not any(cell.strip() for cell in row):
            continue
        if len(row) != len(names):
            yield reader.line_num, f"{len(row)} cells for {len(names)} columns"
            continue
        item: dict[str, Any] = {k: v for k, v in zip(names, row, strict=True) if v != ""}
        ma = item.get("max_attempts")
        if isinstance(ma, str) and ma.strip().lstrip("-").isdigit():
            item["max_attempts"] = int(ma)
        yield reader.line_num, item


@dataclass
class Import:
    """What an import did: the tasks added by line, the lines refused with why, and
    the batch the cluster refused (nothing after it was sent)."""

    path: Path
    added: list[tuple[int, int]] = field(default_factory=list)  # (line, task id)
    refused: list[tuple[int, str]] = field(default_factory=list)  # (line, message)
    not_sent: list[int] = field(default_factory=list)  # lines of the refused batch and after
    error: CorralError | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "file": str(self.path),
            "added": [{"line": n, "task_id": t} for n, t in self.added],
            "refused": [{"line": n, "error": m} for n, m in self.refused],
            "not_sent": self.not_sent,
            "error": None if self.error is None else self.error.message,
        }

    def summary(self) -> str:
        lines = [
            f"imported {_count(len(self.added), 'task')} from {self.path}"
            + (
                f": lines {_ranges([n for n, _ in self.added])},"
                f" ids {_ranges([t for _, t in self.added])}"
                if self.added
                else ""
            )
        ]
        if self.error is not None:
            lines.append(
                f"stopped: the cluster refused the batch from line {self.not_sent[0]}:"
                f" {self.error.message}; lines {_ranges(self.not_sent)} did not go in"
            )
        if self.refused:
            lines.append(
                f"refused {len(self.refused)} line{'' if len(self.refused) == 1 else 's'}:"
            )
            lines += [f"  line {n}: {m}" for n, m in self.refused]
        return "\n".join(lines)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _ranges(numbers: list[int]) -> str:
    """``1-3, 5, 7-9``."""
    out: list[str] = []
    start = prev = None
    for n in sorted(numbers):
        if prev is not None and n == prev + 1:
            prev = n
            continue
        if start is not None:
            out.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = n
    if start is not None:
        out.append(str(start) if start == prev else f"{start}-{prev}")
    return ", ".join(out)


def check_line(item: dict[str, Any], roles: tuple[str, ...]) -> str | None:
    """Why ``item`` is not a task ``add_task`` takes (its rules' message), or None."""
    from corral.cluster import Cluster

    known = _fields()
    unknown = sorted(set(item) - set(known))
    if unknown:
        return f"unknown keys {unknown} (a task has {', '.join(known)})"
    if "title" not in item:
        return "title: a task needs a title"
    rules = getattr(Cluster.add_task, "rules", {})
    try:
        for name, value in item.items():
            if name == "role":
                if value is not None:
                    check_choice(value, roles, "role")
            elif name in rules and not (value is None and name == "max_attempts"):
                rules[name].check(value, name)
    except InvalidInputError as exc:
        return f"{exc.field}: {exc.message}" if exc.field else exc.message
    return None


def run_import(
    c: Client, path: Path, batch_size: int, progress: Any = None, say: Any = None
) -> Import:
    """Check every line, then send the good ones ``batch_size`` at a time;
    ``progress(done, total)`` after each batch, ``say(text)`` for a line per batch."""
    result = Import(path)
    good: list[tuple[int, dict[str, Any]]] = []
    roles: tuple[str, ...] | None = None
    for n, item in read_lines(path):
        if isinstance(item, str):
            result.refused.append((n, item))
            continue
        if roles is None:
            roles = tuple(c.settings().roles)
        why = check_line(item, roles)
        if why is None:
            good.append((n, item))
        else:
            result.refused.append((n, why))
    if not good and not result.refused:
        raise _bad_file(path, "no tasks in it")
    done = 0
    for i in range(0, len(good), batch_size):
        batch = good[i : i + batch_size]
        try:
            tasks = c.add_tasks([item for _, item in batch])
        except CorralError as exc:
            result.error = exc
            result.not_sent = [n for n, _ in good[i:]]
            break
        result.added += [(n, t.id) for (n, _), t in zip(batch, tasks, strict=True)]
        done += len(batch)
        if progress is not None:
            progress(done, len(good))
        if say is not None:
            lines = "line" if len(batch) == 1 else "lines"
            where = _ranges([n for n, _ in batch])
            say(f"{lines} {where}: {_count(len(tasks), 'task')} added")
    return result


@click.command("import", context_settings=CONTEXT_SETTINGS)
@click.argument("file", type=click.Path(path_type=Path, dir_okay=False))
@click.option(
    "--batch-size",
    type=click.IntRange(1, MAX_BATCH),
    default=1000,
    show_default=True,
    help="Tasks per add_tasks call (each batch is one transaction).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.pass_context
def task_import(ctx: click.Context, file: Path, batch_size: int, as_json: bool) -> None:
    """Add the tasks of FILE (.jsonl: an object per line; .csv: a header row naming
    the columns), each with add_task's arguments (title, description, priority, role,
    max_attempts). Every line is checked by add_task's rules first; the good ones go in
    batch by batch (add_tasks), and the summary names each refused line and why. Exit 0
    when every line went in, 1 when some were refused, 2 for a file that is not tasks."""
    c = client(ctx, create=True)
    if as_json or not sys.stdout.isatty():
        say = None if as_json else click.echo
        result = run_import(c, file, batch_size, say=say)
    else:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        with Progress(TextColumn("importing"), BarColumn(), MofNCompleteColumn()) as bar:
            job = bar.add_task("import", total=None)

            def advance(done: int, total: int) -> None:
                bar.update(job, completed=done, total=total)

            result = run_import(c, file, batch_size, progress=advance)
    if as_json:
        click.echo(json.dumps(result.to_dict(), indent=2))
    else:
        click.echo(result.summary())
    if result.error is not None:
        ctx.exit(result.error.exit_code)
    if result.refused:
        ctx.exit(1)


def register(group: click.Group) -> None:
    task = group.commands.get("task")
    if isinstance(task, click.Group):
        task.add_command(task_import)
