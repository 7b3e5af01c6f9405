"""corral's MCP tools and prompts, through the SDK's own client connected in-process
to ``build_server`` over a fresh SQLite cluster on the fake clock.

The transports (stdio, streamable HTTP, restarts) are in ``test_mcp_transports.py``;
here are the answers, the errors and the heartbeat rule, with time under control.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.types import TextContent

import corral
from corral.clock import FakeClock
from corral.mcp import build_server
from tests.support.mcp_text import TOOLS

Call = Callable[..., Awaitable[tuple[bool, str]]]
"""``run``'s ``call(name, **args)``: a tool's answer as ``(is_error, text)``."""


def run(cluster: corral.Cluster, script: Any) -> Any:
    """Run ``script(call)`` against an in-process client; ``call(name, **args)``
    returns ``(is_error, text)``."""

    async def main() -> Any:
        async with Client(build_server(cluster)) as client:

            async def call(name: str, **args: Any) -> tuple[bool, str]:
                result = await client.call_tool(name, args)
                assert len(result.content) == 1
                content = result.content[0]
                assert isinstance(content, TextContent)
                return bool(result.is_error), content.text

            return await script(call, client)

    return anyio.run(main)


def test_lists_every_tool_with_a_short_description(sqlite_cluster: corral.Cluster) -> None:
    """The eleven tools of the issue, the workflow runs' four, the scheduler's four and
    the three for spawn requests, each described in one short sentence or two."""

    async def script(call: Call, client: Client) -> None:
        tools = (await client.list_tools()).tools
        assert {t.name for t in tools} == TOOLS
        for t in tools:
            assert t.description and len(t.description) <= 200, t.name
        schema = {t.name: t.input_schema for t in tools}
        assert schema["register_node"]["required"] == ["agent_id", "role", "model_name"]
        assert schema["set_agent_status"]["required"] == ["agent_id", "status"]
        assert schema["claim_best_task"]["required"] == ["agent_id", "role"]
        prompts = (await client.list_prompts()).prompts
        assert {p.name for p in prompts} == {"worker_protocol", "manager_protocol"}
        for p in prompts:  # they say what the protocol does, citing no outside file
            assert ".md" not in (p.description or "") and "STEP" not in (p.description or "")
        assert client.server_info is not None
        assert client.server_info.name == "corral"
        assert client.server_info.version == corral.__version__

    run(sqlite_cluster, script)


def test_register_derives_strength_from_the_model_table(sqlite_cluster: corral.Cluster) -> None:
    """Strength omitted: taken from ``model_strengths``; given: used as is."""

    async def script(call: Call, client: Client) -> None:
        assert await call(
            "register_node", agent_id="Node-X9J2", role="developer", model_name="claude-sonnet-4-5"
        ) == (False, "Node Node-X9J2 registered as developer (high). Active nodes: 1/4")
        assert await call(
            "register_node", agent_id="Node-Z3F7", role="developer", model_name="claude-haiku"
        ) == (False, "Node Node-Z3F7 registered as developer (medium). Active nodes: 2/4")
        assert await call(
            "register_node",
            agent_id="Node-A1",
            role="architect",
            model_name="claude-haiku",
            strength="low",
        ) == (False, "Node Node-A1 registered as architect (low). Active nodes: 3/4")

    run(sqlite_cluster, script)
    sqlite_cluster.configure(model_strengths=[["haiku", "high"]])
    ok, answer = run(
        sqlite_cluster,
        lambda call, _c: call(
            "register_node", agent_id="Node-B2", role="developer", model_name="claude-haiku"
        ),
    )
    assert (ok, answer) == (False, "Node Node-B2 registered as developer (high). Active nodes: 4/4")


def test_claim_answers_and_assessment_block(sqlite_cluster: corral.Cluster) -> None:
    """``Claimed task N: title`` (the description follows when there is one), the
    empty-board answer, and anti-idle.md's assessment block."""

    async def script(call: Call, client: Client) -> None:
        await call("register_node", agent_id="Node-X9J2", role="developer", model_name="m")
        await call("add_task", title="Implement user authentication", priority="high")
        await call("add_task", title="Write tests", description="cover login and logout")
        await call("add_task", title="Plan the release", priority="low")
        assert await call("assess_workload") == (
            False,
            "\n".join(
                [
                    "📊 Workload Assessment",
                    "=" * 40,
                    "Active Agents: 1/4",
                    "Idle Agents: 1",
                    "Pending Tasks: 3",
                    "In Progress: 0",
                    "Status: OVERLOADED",
                    "Recommendation: spawn_developer",
                ]
            ),
        )
        assert await call("claim_best_task", agent_id="Node-X9J2", role="developer") == (
            False,
            "Claimed task 1: Implement user authentication",
        )
        assert await call("complete_task", agent_id="Node-X9J2", task_id=1) == (
            False,
            "Completed task 1: Implement user authentication",
        )
        assert await call("claim_best_task", agent_id="Node-X9J2", role="developer") == (
            False,
            "Claimed task 2: Write tests\n\ncover login and logout",
        )
        assert await call("fail_task", agent_id="Node-X9J2", task_id="task-2", error="flaky") == (
            False,
            "Task 2 returned to pending (attempt 1 of 3): Write tests",
        )
        await call("claim_best_task", agent_id="Node-X9J2", role="developer")
        await call("complete_task", agent_id="Node-X9J2", task_id=2, result="green")
        await call("claim_best_task", agent_id="Node-X9J2", role="developer")
        await call("complete_task", agent_id="Node-X9J2", task_id=3)
        assert await call("claim_best_task", agent_id="Node-X9J2", role="developer") == (
            False,
            "No pending tasks to claim.",
        )

    run(sqlite_cluster, script)
    assert [t.status for t in sqlite_cluster.list_tasks()] == ["done"] * 3
    assert sqlite_cluster.get_task(2).result == "green"


def test_read_state_is_the_anti_idle_block(sqlite_cluster: corral.Cluster) -> None:
    """read_state renders the same block as the core, for the calling node."""

    async def script(call: Call, client: Client) -> str:
        await call(
            "register_node",
            agent_id="Node-BM-A1B2",
            role="bootstrap_manager",
            model_name="claude-sonnet-4-5",
        )
        await call("add_task", title="Implement authentication", priority="high")
        return (await call("read_state", agent_id="Node-BM-A1B2"))[1]

    text = run(sqlite_cluster, script)
    assert text == sqlite_cluster.read_state("Node-BM-A1B2").text
    assert "1. Implement authentication [pending] (priority: high)" in text
    assert "🟢 Node-BM-A1B2: bootstrap_manager [working] (claude-sonnet-4-5 - high)" in text


def test_every_call_by_a_node_counts_as_its_heartbeat(
    sqlite_cluster: corral.Cluster, clock: FakeClock
) -> None:
    """After each tool call naming the node, its last sign of life is that moment and
    its death deadline moves out by its liveness window."""
    calls: list[tuple[str, dict[str, Any]]] = [
        ("read_state", {}),
        ("assess_workload", {}),
        ("add_task", {"title": "Implement it"}),
        ("catch_up", {}),
        ("heartbeat", {}),
        ("broadcast", {"message": "hello"}),
        ("claim_best_task", {"role": "developer"}),
        ("set_agent_status", {"status": "working", "current_task_id": 1}),
        ("complete_task", {"task_id": 1}),
        ("add_task", {"title": "Implement more"}),
        ("claim_best_task", {"role": "developer"}),
        ("fail_task", {"task_id": 2, "error": "no", "retry": False}),
        ("set_agent_status", {"status": "idle"}),
    ]

    async def script(call: Call, client: Client) -> None:
        await call("register_node", agent_id="Node-X9J2", role="developer", model_name="m")
        dead_at = sqlite_cluster.get_node("Node-X9J2").dead_at
        assert dead_at is not None
        window = dead_at - clock.now()
        for name, args in calls:
            clock.advance(17.0)
            ok = await call(name, agent_id="Node-X9J2", **args)
            assert not ok[0], (name, ok)
            node = sqlite_cluster.get_node("Node-X9J2")
            assert node.last_seen == clock.now(), name
            assert node.dead_at == pytest.approx(clock.now() + window), name

    run(sqlite_cluster, script)


def test_views_without_agent_id_touch_nobody(
    sqlite_cluster: corral.Cluster, clock: FakeClock
) -> None:
    """An operator's read_state / assess_workload (no agent_id) is nobody's heartbeat."""

    async def script(call: Call, client: Client) -> None:
        await call("register_node", agent_id="Node-X9J2", role="developer", model_name="m")
        before = sqlite_cluster.get_node("Node-X9J2")
        clock.advance(30.0)
        await call("read_state")
        await call("assess_workload")
        after = sqlite_cluster.get_node("Node-X9J2")
        assert (after.last_seen, after.dead_at) == (before.last_seen, before.dead_at)

    run(sqlite_cluster, script)


BAD_CALLS: list[tuple[str, dict[str, Any], str]] = [
    ("register_node", {"agent_id": "N2", "role": "chef", "model_name": "m"}, "role must be one of"),
    ("register_node", {"agent_id": 7, "role": "developer", "model_name": "m"}, "agent_id"),
    (
        "register_node",
        {"agent_id": "N2", "role": "developer"},
        "model_name: required argument missing",
    ),
    ("register_node", {"agent_id": " N2", "role": "developer", "model_name": "m"}, "spaces"),
    (
        "register_node",
        {"agent_id": "N2", "role": "developer", "model_name": "m", "strength": "huge"},
        "strength must be one of",
    ),
    ("set_agent_status", {"agent_id": "N1", "status": "asleep"}, "status must be one of"),
    (
        "set_agent_status",
        {"agent_id": "ghost", "status": "idle"},
        "Call register_node with this agent_id.",
    ),
    (
        "set_agent_status",
        {"agent_id": "N1", "status": "working", "current_task_id": 99},
        "unknown task 99",
    ),
    (
        "claim_best_task",
        {"agent_id": "ghost", "role": "developer"},
        "Call register_node with this agent_id.",
    ),
    ("claim_best_task", {"agent_id": "N1", "role": ""}, "role"),
    ("complete_task", {"agent_id": "N1", "task_id": 1}, "claim_best_task"),
    ("complete_task", {"agent_id": "N1", "task_id": "abc"}, "task number"),
    ("complete_task", {"agent_id": "N1", "task_id": 42}, "unknown task 42"),
    ("fail_task", {"agent_id": "N1", "task_id": 1, "epoch": 0}, "epoch"),
    ("add_task", {"title": "   "}, "title must not be empty"),
    ("add_task", {"title": "x", "priority": "urgent"}, "priority must be one of"),
    ("add_task", {"title": "x", "role": "chef"}, "role must be one of"),
    ("heartbeat", {"agent_id": "N1", "health_status": "great"}, "health_status"),
    ("heartbeat", {"agent_id": "N1", "metrics": {"cpu_usage": "hot"}}, "cpu_usage"),
    ("broadcast", {"message": ""}, "message must not be empty"),
    ("catch_up", {}, "agent_id: required argument missing"),
    ("read_state", {"agent_id": "x" * 65}, "longer than"),
    (
        "assess_workload",
        {"agent_id": "Node-ZZ"},
        "no live node Node-ZZ (unknown or terminated). Call register_node with this agent_id.",
    ),
    ("no_such_tool", {}, "unknown tool"),
]


def test_bad_input_is_an_error_answer_and_changes_nothing(sqlite_cluster: corral.Cluster) -> None:
    """Each bad call answers ``ERROR: …`` with a next step, as a tool result (never a
    protocol error), and leaves the nodes, the tasks and the event log as they were."""

    async def script(call: Call, client: Client) -> None:
        await call("register_node", agent_id="N1", role="developer", model_name="m")
        await call("add_task", title="Implement it")
        nodes = sqlite_cluster.list_nodes()
        tasks = sqlite_cluster.list_tasks()
        events = sqlite_cluster.events()
        for name, args, expect in BAD_CALLS:
            is_error, text = await call(name, **args)
            assert is_error, (name, args, text)
            assert text.startswith("ERROR: "), (name, text)
            assert expect in text, (name, text)
            assert text.rstrip().endswith("."), (name, text)
            assert "\n" not in text, (name, text)
        assert sqlite_cluster.list_nodes() == nodes
        assert sqlite_cluster.list_tasks() == tasks
        assert sqlite_cluster.events() == events

    run(sqlite_cluster, script)


def test_a_lost_lease_says_to_claim_again(sqlite_cluster: corral.Cluster) -> None:
    """Completing a task another node now holds is refused, with the next step."""

    async def script(call: Call, client: Client) -> None:
        for node in ("N1", "N2"):
            await call("register_node", agent_id=node, role="developer", model_name="m")
        await call("add_task", title="Implement it")
        await call("claim_best_task", agent_id="N1", role="developer")
        await call("set_agent_status", agent_id="N1", status="terminated")
        assert (await call("claim_best_task", agent_id="N2", role="developer"))[1] == (
            "Claimed task 1: Implement it"
        )
        is_error, text = await call("complete_task", agent_id="N1", task_id=1)
        assert (is_error, text) == (
            True,
            "ERROR: task 1 is held by N2, not N1. You no longer "
            "hold that task: call claim_best_task for new work.",
        )

    run(sqlite_cluster, script)
    assert sqlite_cluster.get_task(1).status == "in_progress"
    assert sqlite_cluster.get_task(1).assigned_to == "N2"


def test_capacity_refusal_is_exactly_the_documents_line(sqlite_cluster: corral.Cluster) -> None:
    """The fifth node gets anti-idle.md's line, nothing more; a manager still fits."""

    async def script(call: Call, client: Client) -> None:
        for i in range(4):
            await call("register_node", agent_id=f"D{i}", role="developer", model_name="m")
        assert await call("register_node", agent_id="D4", role="developer", model_name="m") == (
            True,
            "ERROR: Cluster at capacity (4 nodes). Registration rejected.",
        )
        assert (
            await call(
                "register_node", agent_id="BM", role="bootstrap_manager", model_name="claude-opus-4"
            )
        )[1] == ("Node BM registered as bootstrap_manager (high). Active nodes: 5/4")

    run(sqlite_cluster, script)


def test_catch_up_shows_new_events_then_the_state(sqlite_cluster: corral.Cluster) -> None:
    """catch_up lists what happened since the node's cursor (a broadcast included),
    moves the cursor, and ends with the state block."""

    async def script(call: Call, client: Client) -> None:
        await call("register_node", agent_id="N1", role="developer", model_name="m")
        await call("register_node", agent_id="BM", role="bootstrap_manager", model_name="m")
        await call("broadcast", agent_id="BM", message="SPAWN REQUEST: Need developer node")
        await call("add_task", title="Implement login", priority="high")
        _, text = await call("catch_up", agent_id="N1")
        head, *lines = text.split("\n")
        assert head.startswith("📨 Catch-up for N1: 4 new events (cursor ")
        assert lines[1].startswith("#") and "node_registered BM role=bootstrap_manager" in lines[1]
        assert lines[2].endswith("broadcast BM: SPAWN REQUEST: Need developer node")
        assert lines[3].endswith("task_added task-1 priority=high roles=developer")
        assert text.endswith(sqlite_cluster.read_state("N1").text)
        _, again = await call("catch_up", agent_id="N1")
        assert again.split("\n")[0].startswith("📨 Catch-up for N1: 0 new events")

    run(sqlite_cluster, script)


def test_prompts_carry_the_protocols_with_the_clusters_numbers(
    sqlite_cluster: corral.Cluster,
) -> None:
    """The worker prompt has the idle check with the idle timeout in force; the manager
    prompt has §4.1-4.5, the cap, and never terminates itself."""
    sqlite_cluster.configure(idle_timeout_seconds=45, max_agents=6)

    async def script(call: Call, client: Client) -> tuple[str, str]:
        w = await client.get_prompt(
            "worker_protocol",
            {"agent_id": "Node-A7B3", "role": "developer", "model_name": "claude-sonnet-4-5"},
        )
        m = await client.get_prompt("manager_protocol", {"agent_id": "Node-BM-X1Y2"})
        anon = await client.get_prompt("worker_protocol", {})
        texts = [x.messages[0].content for x in (anon, w, m)]
        assert all(isinstance(t, TextContent) for t in texts)
        anon_text, w_text, m_text = (t.text for t in texts if isinstance(t, TextContent))
        assert "Node-" in anon_text
        return w_text, m_text

    worker, manager = run(sqlite_cluster, script)
    assert 'register_node("Node-A7B3", "developer", "claude-sonnet-4-5")' in worker
    assert "STEP 2: IDLE DETECTION & SELF-TERMINATION" in worker
    assert "Wait 45 seconds" in worker
    assert 'set_agent_status("Node-A7B3", "terminated")' in worker
    assert "Node Node-A7B3 terminating due to lack of work" in worker
    assert 'claim_best_task("Node-A7B3", "developer")' in worker
    for section in ("4.1", "4.2", "4.3", "4.4", "4.5"):
        assert f"## {section} " in manager
    assert 'assess_workload("Node-BM-X1Y2")' in manager
    assert "NEVER terminate yourself" in manager
    assert "Cluster at capacity (6 nodes)" in manager
    assert 'set_agent_status("Node-BM-X1Y2", "terminated")' not in manager


def test_an_operation_that_declares_a_tool_gets_one_without_code_of_its_own(
    sqlite_cluster: corral.Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An operation with ``mcp`` and ``text`` and no tool written for it gets the
    generic one: its method's parameters under the operation's MCP names, its summary
    as its description, the declared rendering, and the caller's heartbeat rule."""
    import dataclasses

    import corral.operations
    from corral.operations import OPERATIONS, operation

    declared = dataclasses.replace(
        operation("terminate_node"),
        mcp="terminate_node",
        text="status_text",
        names={"mcp": {"node_id": "agent_id"}},
    )
    monkeypatch.setattr(  # the registry itself: the server is built from it as it is
        corral.operations,
        "OPERATIONS",
        tuple(declared if op.name == "terminate_node" else op for op in OPERATIONS),
    )
    sqlite_cluster.register_node("w1", "developer")

    async def script(call: Call, client: Client) -> tuple[Any, ...]:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        listed = tools["terminate_node"]
        done = await call("terminate_node", agent_id="w1")
        missing = await call("terminate_node")
        unknown = await call("terminate_node", agent_id="w1", node_id="w1")
        return listed, done, missing, unknown

    listed, done, missing, unknown = run(sqlite_cluster, script)
    assert listed.description == operation("terminate_node").summary
    assert set(listed.input_schema["properties"]) == {"agent_id"}
    assert listed.input_schema["required"] == ["agent_id"]
    assert done[0] is False and "terminated" in done[1]
    assert sqlite_cluster.get_node("w1").status == "terminated"
    assert missing[0] is True and missing[1].startswith("ERROR:") and "agent_id" in missing[1]
    assert unknown[0] is True and unknown[1].startswith("ERROR:") and "node_id" in unknown[1]


def test_the_operator_cancels_and_requeues_tasks(sqlite_cluster: corral.Cluster) -> None:
    """cancel_task and requeue_task answer one line; the bulk tools count first (a
    dry run) and act when told; bad input is an ERROR: answer that changes nothing."""
    c = sqlite_cluster
    c.register_node("W1", "developer")
    first = c.add_task("Implement the parser")
    c.add_task("Implement the lexer")

    async def script(call: Call, client: Client) -> None:
        assert await call("cancel_task", task_id=first.id, reason="obsolete") == (
            False,
            f"Task {first.id} cancelled (cancelled by operator: obsolete)",
        )
        error, text = await call("cancel_task", task_id=first.id)
        assert error and text.startswith("ERROR: ") and "is cancelled" in text
        assert await call("cancel_tasks", title_contains="lexer") == (
            False,
            f"1 task would change (dry run): {first.id + 1}",
        )
        error, text = await call("cancel_tasks", status="done")
        assert error and text.startswith("ERROR: ") and "status" in text
        error, text = await call("requeue_tasks", min_age=-1, dry_run=False)
        assert error and text.startswith("ERROR: ") and "min_age" in text
        assert await call("requeue_tasks", dry_run=False) == (False, "0 tasks changed")
        error, text = await call("requeue_task", task_id=999)
        assert error and text.startswith("ERROR: ") and "unknown task 999" in text

    run(c, script)
    assert [t.status for t in c.list_tasks()] == ["pending", "cancelled"]
    [event] = [e for e in c.events() if e.kind == "task_cancelled"]
    assert (event.data["actor"], event.data["reason"]) == ("operator", "obsolete")


def test_an_agent_reports_progress_on_its_task(sqlite_cluster: corral.Cluster) -> None:
    """report_progress answers one line with the note; the task's deadline moves on;
    a report at a stale epoch is an ERROR: answer naming the epochs."""
    c = sqlite_cluster
    c.configure(progress_timeout=600)
    c.add_task("Implement the parser")

    async def script(call: Call, client: Client) -> None:
        await call("register_node", agent_id="W1", role="developer", model_name="m")
        await call("claim_best_task", agent_id="W1", role="developer")
        assert await call(
            "report_progress", agent_id="W1", task_id=1, epoch=1, note="the lexer is done"
        ) == (False, "Progress recorded on task 1: the lexer is done")
        error, text = await call("report_progress", agent_id="W1", task_id=1, epoch=2)
        assert error and text.startswith("ERROR: ") and "epoch 2" in text, text

    run(c, script)
    task = c.get_task(1)
    assert task.progress_note == "the lexer is done" and task.progress_at is not None
    assert c.store.stuck_deadline() == task.progress_at + 600
