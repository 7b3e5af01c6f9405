"""What every command shares: the client, output, and error-to-exit-code mapping.

Exit codes (each error class's ``exit_code``): 0 done; 1 refused (capacity, lease,
auth); 2 bad input or an unknown node or task (one line naming the bad argument);
3 the store is unavailable (retry).
"""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Callable
from typing import Any

import click

from corral.errors import CorralError, InvalidInputError
from corral.types import Client

__all__ = [
    "CONTEXT_SETTINGS",
    "MAX_SECONDS",
    "Seconds",
    "client",
    "emit",
    "json_option",
    "run_main",
]

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}

json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON.")

# The longest timeout the operating system's waits accept (epoll counts milliseconds
# in a C int): about 24.8 days.
MAX_SECONDS = 2_147_483


class Seconds(click.ParamType[float]):
    """A duration option: a finite number of seconds above zero (or from zero, with
    ``zero_ok``) up to ``MAX_SECONDS``. A bad value is a usage error naming the option."""

    name = "seconds"

    def __init__(self, *, zero_ok: bool = False) -> None:
        self.zero_ok = zero_ok

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        try:
            number = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number of seconds", param, ctx)
        low = number < 0 if self.zero_ok else number <= 0
        if not math.isfinite(number) or low or number > MAX_SECONDS:
            kind = "from 0" if self.zero_ok else "above 0"
            self.fail(
                f"must be a number of seconds {kind} up to {MAX_SECONDS}; got {value}", param, ctx
            )
        return number


def client(ctx: click.Context, *, create: bool = False) -> Client:
    """The client for ``--url`` (opened once per command). An SQLite file that does
    not exist is created only by commands that add to the cluster (``create``); the
    others refuse it, so a mistyped path is an error, not an empty new cluster."""
    from corral.client import connect
    from corral.store import default_url, sqlite_path

    root = ctx.find_root()
    obj = root.obj if isinstance(root.obj, dict) else {}
    if "client" not in obj:
        url = obj.get("url") or default_url()
        if not create and url.startswith("sqlite:"):
            path = sqlite_path(url)
            if path != ":memory:" and not os.path.exists(path):
                raise InvalidInputError(
                    f"no corral database at {path} (corral init creates one)", field="url"
                )
        obj["client"] = connect(url)
        root.obj = obj
        ctx.call_on_close(obj["client"].close)
    found: Client = obj["client"]
    return found


def _plain(value: Any) -> Any:
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def emit(value: Any, as_json: bool, text: Callable[[Any], str] | None = None) -> None:
    if as_json:
        click.echo(json.dumps(_plain(value), indent=2, ensure_ascii=False, default=str))
    elif text is not None:
        click.echo(text(value))
    elif hasattr(value, "text"):
        click.echo(value.text)
    else:
        click.echo(value)


def _fail(message: str, code: int) -> int:
    click.echo(message, err=True)
    return code


def run_main(cli: click.Command, argv: list[str] | None) -> int:
    try:
        rv = cli.main(args=argv, prog_name="corral", standalone_mode=False)
    except click.exceptions.Abort:
        return _fail("aborted", 130)
    except click.UsageError as exc:
        return _fail(f"error: {exc.format_message()}", 2)
    except click.ClickException as exc:
        return _fail(f"error: {exc.format_message()}", exc.exit_code)
    except CorralError as exc:
        # The exit code is the error's own (corral.errors); one line, always "error: ".
        message = exc.message.removeprefix("ERROR: ")
        where = f"{exc.field}: " if exc.field and exc.exit_code == 2 else ""
        return _fail(f"error: {where}{message}", exc.exit_code)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        sys.stderr.close()
        return 0
    return rv if isinstance(rv, int) else 0
