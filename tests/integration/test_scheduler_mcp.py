"""The scheduler's MCP tools: get_assignment, release_assignment, notify and read_inbox
answer one line (inbox items below it); bad calls answer ``ERROR: …`` and change
nothing; a node token acts only as itself."""

from __future__ import annotations

from typing import Any

from mcp.client import Client

import corral
from tests.integration.test_mcp_tools import run


def test_the_scheduler_tools_answer_in_text(sqlite_cluster: corral.Cluster) -> None:
    c = sqlite_cluster
    c.register_node("r1", "runner")
    c.add_agent("persona")

    async def script(call: Any, client: Client) -> None:
        assert await call("notify", recipient="persona", payload={"mention": "@persona"}) == (
            False,
            "Notified persona: inbox item 1.",
        )
        err, text = await call("get_assignment", agent_id="r1", mode="notification")
        lines = text.splitlines()
        assert not err and lines[0].startswith("Assignment 1: activate persona (1 inbox item(s)),")
        assert lines[1] == '- [1] {"mention": "@persona"}'
        assert await call(
            "release_assignment", agent_id="r1", assignment_id=1, epoch=1, outcome={"comments": 1}
        ) == (
            False,
            "Released persona: activation 1 done; 0 unread left.",
        )
        assert await call("get_assignment", agent_id="r1", mode="notification") == (
            False,
            "No assignment: nothing is due for this mode.",
        )
        await call("notify", recipient="persona", payload="two")
        err, text = await call("read_inbox", recipient="persona")
        assert (err, text) == (False, '1 unread item(s), now marked read:\n- [2] "two"')
        assert await call("read_inbox", recipient="persona") == (False, "The inbox is empty.")

    run(c, script)
    assert c.get_agent("persona").comments_today == 1


def test_bad_scheduler_calls_are_error_answers(sqlite_cluster: corral.Cluster) -> None:
    c = sqlite_cluster
    c.register_node("r1", "runner")
    c.add_agent("persona")

    async def script(call: Any, client: Client) -> None:
        calls: list[tuple[str, dict[str, Any]]] = [
            ("get_assignment", {"agent_id": "r1", "mode": "weekly"}),
            ("get_assignment", {"agent_id": "ghost"}),
            ("release_assignment", {"agent_id": "r1", "assignment_id": 9, "epoch": 1}),
            ("notify", {"recipient": "ghost", "payload": 1}),
            ("read_inbox", {"recipient": "persona", "limit": 0}),
        ]
        for name, args in calls:
            err, text = await call(name, **args)
            assert err and text.startswith("ERROR: "), (name, text)

    before = (c.list_agents(), c.list_assignments(), c.events())
    run(c, script)
    assert (c.list_agents(), c.list_assignments(), c.events()) == before


def test_releasing_an_activation_twice_points_to_get_assignment(
    sqlite_cluster: corral.Cluster,
) -> None:
    """A release refused (released already) says what to do next for an activation,
    call get_assignment, not claim_best_task (a task's hint); the Python error too."""
    c = sqlite_cluster
    c.register_node("r1", "runner")
    c.add_agent("persona")
    a = c.get_assignment("r1", "exploration")
    assert a is not None
    c.release_assignment(a.id, "r1", a.epoch)

    async def script(call: Any, client: Client) -> None:
        err, text = await call(
            "release_assignment", agent_id="r1", assignment_id=a.id, epoch=a.epoch
        )
        assert err and text.startswith("ERROR: "), text
        assert "get_assignment" in text and "claim_best_task" not in text, text

    run(c, script)
    try:
        c.release_assignment(a.id, "r1", a.epoch)
    except corral.LeaseError as exc:
        assert "get_assignment" in exc.hint
    else:
        raise AssertionError("a second release was accepted")
