"""Nothing public on ``corral.Cluster`` goes without a contract test.

Each ``tests/contract/test_*.py`` module declares the operations it tests:
``OPERATIONS`` (their behaviour) and ``BAD_INPUT`` (their refusals: error class,
field, nothing changed). The unions must cover every public method of ``Cluster``,
less the exclusions below, each with its reason; and a module may only claim an
operation it calls.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from types import ModuleType

import corral

HERE = Path(__file__).parent

# Public attributes of Cluster that are not operations of the cluster.
NOT_OPERATIONS = {
    "close": "releases the client's own resources; every fixture calls it at teardown",
}
# Operations that take no argument: there is no bad input to refuse.
NO_INPUT = {
    "settings": "takes no argument",
    "assess_workload": "takes no argument",
    "stats": "takes no argument",
    "list_tokens": "takes no argument",
}


def public_operations() -> set[str]:
    return {m for m in dir(corral.Cluster) if not m.startswith("_")} - set(NOT_OPERATIONS)


def contract_modules() -> list[ModuleType]:
    names = sorted(p.stem for p in HERE.glob("test_*.py") if p.stem != "test_coverage")
    return [importlib.import_module(f"tests.contract.{name}") for name in names]


def declared(attr: str) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for module in contract_modules():
        for op in getattr(module, attr, ()):
            out.setdefault(op, set()).add(module.__name__)
    return out


def test_cluster_attributes_are_what_the_exclusions_assume() -> None:
    """An exclusion names a real attribute of Cluster (a stale one is an error)."""
    public = {m for m in dir(corral.Cluster) if not m.startswith("_")}
    assert set(NOT_OPERATIONS) <= public
    assert set(NO_INPUT) <= public_operations()
    # ``store``, ``clock`` and ``url`` are instance attributes, not operations.
    assert not {"store", "clock", "url"} & public


def test_every_module_declares_what_it_covers() -> None:
    missing = [m.__name__ for m in contract_modules() if not getattr(m, "OPERATIONS", None)]
    assert missing == []


def test_every_operation_has_a_behaviour_test() -> None:
    assert sorted(public_operations() - set(declared("OPERATIONS"))) == []


def test_every_operation_with_arguments_has_a_bad_input_test() -> None:
    assert sorted(public_operations() - set(NO_INPUT) - set(declared("BAD_INPUT"))) == []


def test_declarations_name_real_operations_the_module_calls() -> None:
    """A module may only claim an operation of Cluster that its tests call."""
    wrong = []
    for module in contract_modules():
        source = Path(module.__file__ or "").read_text()
        for op in {*getattr(module, "OPERATIONS", ()), *getattr(module, "BAD_INPUT", ())}:
            if op not in public_operations() or not re.search(rf"\.{op}\(", source):
                wrong.append(f"{module.__name__}: {op}")
    assert wrong == []
