"""The fleet the pools' step tests drive (tests/integration/test_fleet_*.py): a relay
agent and one developer pool ``dev`` that depends on it, its commands ``true``."""

from __future__ import annotations

from typing import Any


def one_pool(**pool: Any) -> dict[str, Any]:
    """The manifest, the pool's fields over ``max`` 3 and ``cooldown`` 10."""
    return {
        "agents": [{"id": "relay", "cmd": "true"}],
        "pools": [
            {
                "id": "dev",
                "cmd": "true",
                "role": "developer",
                "max": 3,
                "cooldown": 10,
                "depends_on": ["relay"],
                **pool,
            }
        ],
    }
