"""Every operation of the registry is on every surface it claims, with the same
parameters: ``Cluster``, the HTTP routes, the OpenAPI document, the remote client,
the MCP tools and the CLI (``corral.operations``)."""

from __future__ import annotations

import asyncio
import importlib.util
import inspect
import re
import sys
from pathlib import Path
from types import ModuleType

import click
import pytest

import corral
from corral.cli import cli as corral_cli
from corral.operations import OPERATIONS, Operation
from corral.remote import HttpClient

# Public attributes of Cluster that are not operations (the client's own lifecycle).
NOT_OPERATIONS = {"close", "store", "clock", "url"}
# The MCP convention: a tool may take the caller's agent_id so the call counts as its
# heartbeat, whether or not the operation names a node.
MCP_CALLER = "agent_id"
# CLI options every command may have that are no parameter of an operation.
CLI_OUTPUT = {"as_json", "help"}


def _params(op: Operation) -> dict[str, inspect.Parameter]:
    """The operation's parameters (its ``Cluster`` method's, without ``self``)."""
    sig = inspect.signature(getattr(corral.Cluster, op.name))
    return {n: p for n, p in sig.parameters.items() if n != "self"}


def _named(op: Operation, surface: str) -> set[str]:
    """The names the surface must take: every named parameter, renamed for the
    surface, except those it omits on purpose."""
    rename = op.names.get(surface, {})
    omit = op.omits.get(surface, {})
    return {
        rename.get(n, n)
        for n, p in _params(op).items()
        if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL) and n not in omit
    }


def test_every_cluster_method_is_one_registered_operation() -> None:
    public = {n for n in dir(corral.Cluster) if not n.startswith("_")} - NOT_OPERATIONS
    names = [op.name for op in OPERATIONS]
    assert len(names) == len(set(names)), "an operation is declared twice"
    assert set(names) == public, (
        f"not in the registry: {sorted(public - set(names))}; "
        f"not a Cluster method: {sorted(set(names) - public)}"
    )


def test_routes_are_unique_and_their_path_parameters_are_the_methods() -> None:
    routes = [op.route for op in OPERATIONS]
    assert len(routes) == len(set(routes))
    for op in OPERATIONS:
        assert set(op.path_params) <= set(_params(op)), op.name
        assert op.node is None or op.node in _params(op), op.name
        assert op.summary, f"{op.name} has no docstring (its help)"


def test_every_operation_is_an_http_route_with_the_methods_parameters() -> None:
    from corral.server.routes import build_ops

    by_name = {ep.name: ep for ep in build_ops()}
    for op in OPERATIONS:
        route = by_name.get(op.name)
        assert route is not None, f"{op.name} has no HTTP route"
        assert (route.method, route.path.replace(":path", "")) == (op.method, op.path)
        assert route.op is op  # one descriptor: the route is the operation's
        fields = set(op.path_params)
        for model in (route.body, route.query):
            if model is not None:
                fields |= set(model.model_fields)
        expected = _named(op, "http") - {op.actor}  # the actor is the caller's token
        assert expected <= fields, f"{op.name}: HTTP lacks {sorted(expected - fields)}"
        extra = fields - expected - set(op.adds.get("http", {}))
        has_kwargs = any(p.kind == p.VAR_KEYWORD for p in _params(op).values())
        assert has_kwargs or not extra, f"{op.name}: HTTP takes unknown {sorted(extra)}"


def test_every_operation_is_in_the_openapi_document() -> None:
    from corral.server.openapi import build_openapi
    from corral.server.routes import build_ops

    doc = build_openapi(build_ops(), version=corral.__version__)
    for op in OPERATIONS:
        entry = doc["paths"].get(op.path, {}).get(op.method.lower())
        assert entry is not None, f"{op.name} is not in the OpenAPI document"
        assert entry["operationId"] == op.name
        assert entry["summary"] == op.summary
        assert str(op.status) in entry["responses"]


def test_the_remote_client_has_every_operation_with_the_same_signature() -> None:
    for op in OPERATIONS:
        remote = getattr(HttpClient, op.name, None)
        assert remote is not None, f"HttpClient lacks {op.name}"
        embedded = inspect.signature(getattr(corral.Cluster, op.name))
        assert inspect.signature(remote) == embedded, op.name


def _codegen() -> ModuleType:
    """The generator (scripts/codegen.py: a development tool, not in the package)."""
    path = Path(__file__).parents[2] / "scripts" / "codegen.py"
    spec = importlib.util.spec_from_file_location("codegen", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_generated_client_code_is_current() -> None:
    stale = _codegen().check()
    assert not stale, (
        f"src/corral/{', src/corral/'.join(stale)} out of date with the operations: "
        "run python scripts/codegen.py"
    )


def test_the_generated_code_follows_a_changed_operation(monkeypatch: pytest.MonkeyPatch) -> None:
    """The generator reads the Cluster method: a new parameter shows up in the
    Protocol and in the remote method, which sends it under its name."""
    codegen = _codegen()

    # A bare ``list``: the generator's text of this very signature is asserted below.
    def list_processes(self: corral.Cluster, host: str | None = None, *, limit: int = 5) -> list:  # type: ignore[type-arg]
        """Supervised processes."""
        return []

    monkeypatch.setattr(corral.Cluster, "list_processes", list_processes)
    assert "def list_processes(self, host: str | None = None, *, limit: int = 5) -> list:" in (
        codegen.protocol_source()
    )
    assert '"host": host, "limit": limit' in codegen.remote_source()
    assert codegen.check() == ["client_ops.py", "remote_ops.py"]


def test_nothing_imports_the_generator_at_run_time() -> None:
    assert not (Path(corral.__file__).parent / "codegen.py").exists()
    assert "codegen" not in "".join(sys.modules)


def test_every_operation_is_served_by_the_generic_handler_but_its_declared_exceptions() -> None:
    """Code of its own on the server only for a protocol exception the registry
    declares (``Operation.exception``), and an answer type for every route."""
    from corral.server.routes import EXCEPTIONS, build_ops

    for ep in build_ops():
        own = ep.handler is not ep
        assert own == (ep.op.exception in EXCEPTIONS), ep.name
        assert ep.answer is not None, f"{ep.name}: no answer type for OpenAPI"
    source = "".join(
        (Path(corral.__file__).parent / "server" / f).read_text()
        for f in ("routes.py", "generic.py", "dispatch.py", "models.py")
    )
    assert not re.search(r"\bop\.name (==|!=|in) ", source), "a test of an operation's name"


def _mcp_tools() -> dict[str, set[str]]:
    from corral.mcp import build_server

    class _NoClient:
        pass

    # Listing the tools calls no operation: the server needs no client for it.
    tools = asyncio.run(build_server(_NoClient()).list_tools())  # type: ignore[arg-type]
    return {t.name: set(t.input_schema.get("properties", {})) for t in tools}


def test_every_mcp_tool_is_a_registered_operation_with_its_parameters() -> None:
    tools = _mcp_tools()
    claimed = {op.mcp: op for op in OPERATIONS if op.mcp is not None}
    assert set(tools) == set(claimed), (
        f"tools without an operation: {sorted(set(tools) - set(claimed))}; "
        f"operations whose tool is missing: {sorted(set(claimed) - set(tools))}"
    )
    for name, op in claimed.items():
        expected = _named(op, "mcp")
        assert expected <= tools[name], f"tool {name} lacks {sorted(expected - tools[name])}"
        extra = tools[name] - expected - {MCP_CALLER} - set(op.adds.get("mcp", {}))
        has_kwargs = any(p.kind == p.VAR_KEYWORD for p in _params(op).values())
        assert has_kwargs or not extra, f"tool {name} takes unknown {sorted(extra)}"


def test_every_mcp_tool_declares_how_it_renders_its_answer() -> None:
    from corral.mcp import text

    for op in OPERATIONS:
        if op.mcp is None:
            assert op.text is None, f"{op.name} renders text but has no tool"
            continue
        assert op.text is not None, f"tool {op.mcp} declares no text rendering"
        assert op.text == ".text" or callable(getattr(text, op.text, None)), op.text


def _command(path: str) -> click.Command:
    cmd: click.Command = corral_cli
    for part in path.split():
        assert isinstance(cmd, click.Group), path
        sub = cmd.commands.get(part)
        assert sub is not None, f"no CLI command `corral {path}`"
        cmd = sub
    return cmd


def test_every_cli_command_of_an_operation_takes_its_parameters() -> None:
    for op in OPERATIONS:
        if op.cli is None:
            continue
        cmd = _command(op.cli)
        names = {p.name for p in cmd.params} - CLI_OUTPUT
        expected = _named(op, "cli")
        assert expected <= names, f"`corral {op.cli}` lacks {sorted(expected - names)}"


@pytest.mark.parametrize("surface", ["http", "mcp", "cli"])
def test_renames_and_omissions_name_real_parameters(surface: str) -> None:
    for op in OPERATIONS:
        params = set(_params(op))
        for name in [*op.names.get(surface, {}), *op.omits.get(surface, {})]:
            assert name in params, f"{op.name}: {surface} names unknown parameter {name}"


def test_the_operations_page_lists_the_registry() -> None:
    """docs/operations.md's table is the registry's (regenerate it with
    ``python -m corral.operations``)."""
    from corral.operations import markdown_table

    page = (Path(__file__).parents[2] / "docs" / "operations.md").read_text()
    assert markdown_table() in page


def test_the_operations_page_lists_the_control_commands() -> None:
    """docs/operations.md's table of ``corral ctl`` commands is the supervisor's
    command registry."""
    from corral.operations import control_table

    page = (Path(__file__).parents[2] / "docs" / "operations.md").read_text()
    assert control_table() in page
    assert "`corral ctl restart` | id | `restart`" in control_table()
