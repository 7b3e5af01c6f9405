"""Issue 15 "closed store port": statistics and the server's inline calls are the
port's methods (``Store``), so nothing outside ``corral.store`` reaches into an
adapter; ``WouldBlock`` is part of the port and a ``CorralError``."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import corral
from corral.errors import CorralError
from corral.store.base import Store, WouldBlock
from corral.store.sqlite import SQLiteStore

SRC = Path(corral.__file__).parent


def test_would_block_is_an_internal_corral_error() -> None:
    assert issubclass(WouldBlock, CorralError)
    assert WouldBlock.code == "would_block" and WouldBlock.status == 503
    assert not hasattr(corral, "WouldBlock")


def test_the_port_has_defaults_for_stats_nowait_and_group(tmp_path: Path) -> None:
    assert Store.inline_calls is False
    with pytest.raises(NotImplementedError, match="no statistics"):
        Store.stats(None)  # type: ignore[arg-type]
    with pytest.raises(WouldBlock), Store.nowait(None):  # type: ignore[arg-type]
        pass
    with Store.group(None):  # type: ignore[arg-type]
        pass  # by default each call commits by itself
    store = SQLiteStore(tmp_path / "c.db")
    try:
        assert store.inline_calls is True
        assert store.stats().tasks == {}
        assert store.write_lock_holder() is None and store.write_lock_timeouts() == 0
    finally:
        store.close()


def _outside_store() -> list[Path]:
    return [p for p in SRC.rglob("*.py") if SRC / "store" not in p.parents]


def test_nothing_outside_the_store_package_reaches_into_an_adapter() -> None:
    """No import of an adapter module (``corral.store.sqlite``, ``.postgres``, ...)
    and no private attribute of a store (``store._read``, ``getattr(store, "_x")``)
    outside ``corral/store/``."""
    port = {"corral.store", "corral.store.base", "corral.store.stats"}
    found = []
    for path in _outside_store():
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("corral.store"):
                if node.module not in port:
                    found.append(f"{path.name}: from {node.module} import ...")
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith("corral.store.") and alias.name not in port:
                        found.append(f"{path.name}: import {alias.name}")
            elif (
                isinstance(node, ast.Attribute)
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
                and "store" in ast.unparse(node.value)
            ):
                found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
            elif isinstance(node, ast.Call) and ast.unparse(node.func) == "getattr":
                args = node.args
                if (
                    len(args) >= 2
                    and "store" in ast.unparse(args[0])
                    and isinstance(args[1], ast.Constant)
                    and str(args[1].value).startswith("_")
                ):
                    found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
    assert found == []
