"""A real ``corral serve`` process for tests that drive the CLI against HTTP."""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

from tests.integration.test_mcp_transports import Server
from tests.support.backends.http import TOKEN, free_port

__all__ = ["TOKEN", "corral_serve"]


@contextlib.contextmanager
def corral_serve(tmp_path: Path) -> Iterator[str]:
    """``corral serve`` over a fresh SQLite file in ``tmp_path``, the operator's token
    ``TOKEN``; its base URL, the process killed on the way out."""
    exe = shutil.which("corral", path=os.path.dirname(sys.executable))
    assert exe is not None
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o600)
    port = free_port()
    url = f"sqlite:///{tmp_path / 'corral.db'}"
    argv = [exe, "--url", url, "serve", "--port", str(port), "--token-file", str(token_file)]
    server = Server(argv, port, {k: v for k, v in os.environ.items() if k != "CORRAL_TOKEN"})
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.kill()
