"""The typed client: ``corral.types.Client`` is what ``Cluster`` and ``HttpClient``
both offer, method for method and signature for signature; the status sets are the
Literals of ``corral.types``; ``mypy --strict`` passes over ``src/corral``."""

from __future__ import annotations

import inspect
import subprocess
import sys
import textwrap
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any, get_args

import pytest

import corral
import corral.model
import corral.params
import corral.scheduler.ops
import corral.scheduler.records
import corral.spawning
import corral.store.stats
import corral.tokens
import corral.types
import corral.workflows.model
from corral import defaults
from corral.cluster import Cluster
from corral.errors import CorralError, InvalidInputError
from corral.remote import HttpClient
from corral.types import Client

ROOT = Path(__file__).resolve().parents[2]

# Methods only the remote client has: its transport and the server's text view.
HTTP_ONLY = {"request", "for_node", "keyed"}  # keyed: corral.outage's idempotency keys
_DUNDERS = {"__enter__", "__exit__"}


def _own(cls: type) -> dict[str, Any]:
    """The class's attributes and its corral bases' (mixins such as the scheduler's)."""
    out: dict[str, Any] = {}
    for klass in reversed(cls.__mro__):
        if klass.__module__.startswith("corral"):
            out.update(vars(klass))
    return out


def _methods(cls: type) -> set[str]:
    """The class's own methods and those of its corral mixins."""
    return {
        name
        for name, value in _own(cls).items()
        if callable(value) and (not name.startswith("_") or name in _DUNDERS)
    }


def _protocol_methods() -> set[str]:
    return {
        name
        for name, value in _own(Client).items()
        if inspect.isfunction(value) and (not name.startswith("_") or name in _DUNDERS)
    }


# The names the annotations use (corral.types imports the records only for checkers).
_NAMES: dict[str, Any] = {
    **vars(typing),
    **vars(corral.model),
    **vars(corral.store.stats),
    **vars(corral.spawning),
    **vars(corral.tokens),
    **vars(corral.types),
    **vars(corral.params),
    "ModeName": corral.scheduler.ops.ModeName,
    **vars(corral.scheduler.records),
    **vars(corral.workflows.model),
}


def _hints(fn: Any, owner: type) -> dict[str, Any]:
    """The resolved annotations; ``Self`` stands for the owning class."""
    hints = typing.get_type_hints(fn, globalns={**_NAMES, **vars(inspect.getmodule(fn))})
    return {k: owner if v is typing.Self else v for k, v in hints.items()}


def _shape(fn: Any) -> list[tuple[str, Any, Any]]:
    return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]


def test_the_protocol_has_every_operation_of_the_brief() -> None:
    ops = {
        "settings",
        "configure",
        "register_node",
        "get_node",
        "list_nodes",
        "set_agent_status",
        "terminate_node",
        "heartbeat",
        "touch",
        "add_task",
        "add_tasks",
        "get_task",
        "list_tasks",
        "claim_best_task",
        "complete_task",
        "complete_and_claim",
        "fail_task",
        "assess_workload",
        "read_state",
        "read_state_text",
        "catch_up",
        "events",
        "broadcast",
        "alert",
        "record_metrics",
        "metrics_series",
        "stats",
        "report_processes",
        "list_processes",
        "request_process_action",
        "process_actions",
        "ack_process_action",
        "close",
        "__enter__",
        "__exit__",
        "add_agent",
        "get_agent",
        "list_agents",
        "notify",
        "read_inbox",
        "get_assignment",
        "release_assignment",
        "list_assignments",
        "run_workflow",
        "list_handlers",
        "get_handler",
        "send_event",
        "serve_workflows",
        "take_workflow_work",
        "report_handler",
        "report_steps",
        "release_handler",
        "release_workflow",
        "resume_workflow",
        "request_spawn",
        "spawn_requests",
        "accept_spawn_request",
        "decline_spawn_request",
        "withdraw_spawn_request",
        "fulfil_spawn_request",
        "cancel_task",
        "requeue_task",
        "cancel_tasks",
        "requeue_tasks",
        "create_token",
        "list_tokens",
        "revoke_token",
        "report_progress",
        "usage",
    }
    assert _protocol_methods() == ops


def test_cluster_and_http_client_have_exactly_the_protocols_methods() -> None:
    protocol = _protocol_methods()
    assert _methods(Cluster) == protocol
    assert _methods(HttpClient) - HTTP_ONLY == protocol
    assert _methods(HttpClient) >= HTTP_ONLY


@pytest.mark.parametrize("name", sorted(_protocol_methods()))
def test_same_signature_on_both_clients_and_the_protocol(name: str) -> None:
    """Names, kinds and defaults of every parameter, and the resolved types of the
    parameters and the result (``Self`` being each class)."""
    spec = getattr(Client, name)
    embedded = getattr(Cluster, name)
    remote = getattr(HttpClient, name)
    assert _shape(embedded) == _shape(remote) == _shape(spec)
    want = _hints(spec, Client)
    assert _hints(embedded, Cluster) == {**want, **_self_result(want, spec, Cluster)}
    assert _hints(remote, HttpClient) == {**want, **_self_result(want, spec, HttpClient)}


def _self_result(want: dict[str, Any], spec: Any, cls: type) -> dict[str, Any]:
    return {"return": cls} if want.get("return") is Client else {}


def test_instances_have_the_protocols_url(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'c.db'}"
    with corral.connect(url) as embedded, HttpClient("http://127.0.0.1:9", token="t") as remote:
        for client in (embedded, remote):
            assert _protocol_methods() <= {n for n in dir(client) if callable(getattr(client, n))}
        assert embedded.url == url
        assert remote.url == "http://127.0.0.1:9"


def test_connect_and_the_sdk_are_typed_with_client() -> None:
    from corral.worker.destinations import ClusterDestination, MetricsDestination
    from corral.worker.heartbeat import HeartbeatMonitor
    from corral.worker.worker import Worker

    assert _hints(corral.connect, object)["return"] is Client
    for fn, param in (
        (Worker.__init__, "cluster"),
        (HeartbeatMonitor.__init__, "cluster"),
        (ClusterDestination.__init__, "cluster"),
        (MetricsDestination.__init__, "cluster"),
    ):
        hint = _hints(fn, object)[param]
        assert hint == Client or set(get_args(hint)) == {Client, type(None)}, (fn, hint)


def test_statuses_are_the_literals() -> None:
    t = corral.types
    assert get_args(t.NodeStatus) == defaults.NODE_STATUSES
    assert get_args(t.TaskStatus) == defaults.TASK_STATUSES
    assert get_args(t.Priority) == defaults.PRIORITIES
    assert get_args(t.Strength) == defaults.STRENGTHS
    assert get_args(t.HealthStatus) == defaults.HEALTH_STATUSES
    from corral.server.metrics import _ASSESSMENT_STATUSES

    assert get_args(t.WorkloadStatus) == _ASSESSMENT_STATUSES


def test_bad_status_is_refused_from_the_one_set(sqlite_cluster: Cluster) -> None:
    with pytest.raises(InvalidInputError) as caught:
        sqlite_cluster.list_nodes(status="sleeping")
    assert caught.value.field == "status"
    assert all(s in str(caught.value) for s in get_args(corral.types.NodeStatus))


# --- the worker SDK package and its errors --------------------------------------------
def test_public_imports_of_the_worker_package() -> None:
    import corral.worker as pkg
    from corral.worker.heartbeat import HeartbeatMonitor
    from corral.worker.worker import Worker

    assert corral.Worker is Worker is pkg.Worker
    assert corral.HeartbeatMonitor is HeartbeatMonitor is pkg.HeartbeatMonitor
    assert {"Worker", "HeartbeatMonitor"} <= set(corral.__all__)


def test_worker_errors_are_corral_errors() -> None:
    from corral.worker import DestinationError, TaskFailed

    for cls in (DestinationError, TaskFailed):
        assert issubclass(cls, CorralError)
        assert cls.code not in {"corral_error", InvalidInputError.code}
    assert str(TaskFailed("disk full")) == "disk full"
    assert str(TaskFailed()) == ""  # a bare raise still works


def test_bad_sdk_arguments_raise_invalid_input_naming_the_field(
    sqlite_cluster: Cluster,
) -> None:
    from corral.worker.destinations import (
        GitHubDestination,
        MetricsDestination,
        WebhookDestination,
    )
    from corral.worker.heartbeat import HeartbeatMonitor

    cases: list[tuple[Callable[[], object], str]] = [
        (
            lambda: HeartbeatMonitor("W1", sqlite_cluster, heartbeat_interval=0),
            "heartbeat_interval",
        ),
        (lambda: HeartbeatMonitor("W1", sqlite_cluster, capacity=0), "capacity"),
        (lambda: HeartbeatMonitor("W1"), "cluster"),
        (lambda: WebhookDestination("ftp://x"), "url"),
        (lambda: GitHubDestination("no-slash", 1), "repo"),
        (lambda: MetricsDestination(sqlite_cluster, keep=0), "keep"),
    ]
    for make, field in cases:
        with pytest.raises(InvalidInputError) as caught:
            make()
        assert caught.value.field == field
        assert isinstance(caught.value, ValueError)  # what callers caught before


def test_monitor_refuses_a_remote_client() -> None:
    from corral.monitor import Monitor

    with (
        HttpClient("http://127.0.0.1:9", token="t") as remote,
        pytest.raises(InvalidInputError, match="store itself") as caught,
    ):
        Monitor(remote)
    assert caught.value.field == "url"


# --- the checker ----------------------------------------------------------------------
def _mypy(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mypy", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )


def test_a_checker_sees_the_client_and_the_lazy_classes(tmp_path: Path) -> None:
    snippet = tmp_path / "use_corral.py"
    snippet.write_text(
        textwrap.dedent(
            """
            import corral

            c = corral.connect("sqlite:///x.db")
            reveal_type(c)
            reveal_type(corral.Worker)
            reveal_type(corral.HeartbeatMonitor)
            c.no_such_method()
            corral.Worker("W1", "developer", cluster=c, heartbeat_interval="5")
            """
        )
    )
    out = _mypy("--strict", "--no-error-summary", str(snippet)).stdout
    assert 'Revealed type is "corral.types.Client"' in out, out
    assert '-> corral.worker.worker.Worker"' in out, out  # the class, not ``object``
    assert '-> corral.worker.heartbeat.HeartbeatMonitor"' in out, out
    assert '"Client" has no attribute "no_such_method"' in out, out
    assert 'Argument "heartbeat_interval" to "Worker" has incompatible type "str"' in out, out
