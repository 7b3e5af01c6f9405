"""Running part of the supervisor in a fresh interpreter that skips the package
``corral``'s ``__init__``.

``import corral`` loads the library's public API for its users (the client, the
cluster, the store, the monitor...): about 6 MB of memory that the log daemon and
the supervisor's process never use, and both stay up for as long as the agents run.
:func:`argv` is a command line that registers ``corral`` as a bare package over its
own directory (so ``corral.errors``, ``corral.supervisor.*`` and, when needed,
``corral.client`` import as usual, and nothing else is loaded) and then calls one
function with the remaining arguments. The code run is the same as through
``python -m``; only the package's re-exports are missing, which this code does not use.
"""

from __future__ import annotations

import os
import sys

__all__ = ["PACKAGE_DIR", "argv", "preamble"]

PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def preamble() -> str:
    """Python code registering ``corral`` as a bare package over its directory."""
    return (
        "import sys, types\n"
        "pkg = types.ModuleType('corral')\n"
        f"pkg.__path__ = [{PACKAGE_DIR!r}]\n"
        "sys.modules['corral'] = pkg\n"
    )


def argv(target: str, label: str, *args: str, same_flags: bool = False) -> list[str]:
    """The command line calling ``target`` ("module:function", given the list
    ``args`` and returning an exit code) with ``sys.executable``. ``label`` comes
    right after the code and names the process in ``ps``; the function sees only
    ``args``. ``same_flags``: with this interpreter's options (``-W``, ``-X``, ``-O``
    ..., as ``subprocess`` and ``multiprocessing`` pass them on)."""
    module, func = target.split(":")
    code = f"{preamble()}from {module} import {func}\nsys.exit({func}(sys.argv[2:]))\n"
    flags: list[str] = []
    if same_flags:
        import subprocess

        flags = list(getattr(subprocess, "_args_from_interpreter_flags", list)())
    return [sys.executable, *flags, "-c", code, label, *args]
