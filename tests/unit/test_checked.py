"""``validation.checked``: the parameter rules run before the body, on both of its
wrappers (written out per signature, and the loop kept for variadic signatures),
with the same answers: values as the rule returns them, a bad argument refused naming
its parameter, ``None`` let through where the annotation allows it, a default never
checked, and Python's own errors for a call that does not fit the signature."""

from __future__ import annotations

import inspect
from typing import Annotated, Any

import pytest

from corral.errors import InvalidInputError
from corral.validation import EPOCH, ID, TASK_REF, checked

NodeId = Annotated[str, ID]
TaskRef = Annotated[int | str, TASK_REF]
Epoch = Annotated[int, EPOCH]


class Service:
    @checked
    def written_out(
        self,
        task_id: TaskRef,
        node_id: NodeId,
        epoch: Epoch | None = None,
        limit: Epoch = 0,  # not a valid epoch: a default is not checked
        note: str = "",
        *,
        role: NodeId = "worker",
    ) -> tuple[Any, ...]:
        return (task_id, node_id, epoch, limit, note, role)

    @checked
    def looped(
        self, task_id: TaskRef, node_id: NodeId, epoch: Epoch | None = None, *rest: Any
    ) -> tuple[Any, ...]:
        return (task_id, node_id, epoch, rest)


def test_the_written_out_wrapper_runs_the_rules_and_keeps_the_signature() -> None:
    s = Service()
    assert s.written_out("task-3", "A") == (3, "A", None, 0, "", "worker")
    assert s.written_out(3, "A", 2, 5, "n", role="r") == (3, "A", 2, 5, "n", "r")
    assert s.written_out(node_id="A", task_id="4", epoch=None, limit=7) == (
        4,
        "A",
        None,
        7,
        "",
        "worker",
    )
    with pytest.raises(InvalidInputError, match="epoch") as bad:
        s.written_out(3, "A", epoch=0)
    assert bad.value.field == "epoch"
    with pytest.raises(InvalidInputError, match="limit"):
        s.written_out(3, "A", limit=0)  # given, it is checked
    with pytest.raises(InvalidInputError, match="role"):
        s.written_out(3, "A", role=" r")
    with pytest.raises(InvalidInputError, match="task_id"):
        s.written_out(None, "A")  # type: ignore[arg-type]  # None is checked, and refused
    with pytest.raises(TypeError, match="unexpected keyword argument 'bogus'"):
        s.written_out(3, "A", bogus=1)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="missing 1 required positional argument: 'node_id'"):
        s.written_out(3)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        s.written_out(3, "A", 1, 1, "", "r")  # type: ignore[call-arg]  # role is keyword-only
    # What the surfaces read from it: the signature, and the rules by parameter.
    original = inspect.signature(Service.written_out.__wrapped__)  # type: ignore[attr-defined]
    assert inspect.signature(Service.written_out) == original
    assert Service.written_out.rules == {  # type: ignore[attr-defined]
        "task_id": TASK_REF,
        "node_id": ID,
        "epoch": EPOCH,
        "limit": EPOCH,
        "role": ID,
    }
    assert Service.written_out.optional == {"epoch"}  # type: ignore[attr-defined]


def test_the_loop_wrapper_answers_the_same_for_a_variadic_signature() -> None:
    s = Service()
    assert s.looped("task-3", "A") == (3, "A", None, ())
    assert s.looped(3, "A", 2, "x", "y") == (3, "A", 2, ("x", "y"))
    with pytest.raises(InvalidInputError, match="epoch"):
        s.looped(3, "A", 0)
    with pytest.raises(InvalidInputError, match="node_id"):
        s.looped(3, "")
    assert Service.looped.optional == {"epoch"}  # type: ignore[attr-defined]
