"""docs/server.md's metrics table names every metric ``/metrics`` exposes, by the
name a scrape shows (a counter with its ``_total``), and nothing else (it lacked
``corral_store_write_lock_timeouts_total``, ``corral_store_write_lock_holder_stopped``
and ``corral_desired_workers``)."""

from __future__ import annotations

import re
from pathlib import Path

import corral
from corral.cluster import Cluster
from corral.server.metrics import Metrics

ROOT = Path(__file__).resolve().parents[2]


def _exposed(tmp_path: Path) -> set[str]:
    with corral.connect(f"sqlite:///{tmp_path / 'c.db'}") as c:
        assert isinstance(c, Cluster)  # a database URL gives the embedded client
        c.register_node("A", "developer")
        m = Metrics(c)
        m.observe("GET", "/v1/settings", 200, 0.001)
        text = m.render().decode()
    # the names as a scrape shows them (this client's TYPE lines keep a counter's _total)
    return set(re.findall(r"^# TYPE (\S+) \S+$", text, flags=re.MULTILINE))


def _documented() -> set[str]:
    page = (ROOT / "docs" / "server.md").read_text()
    section = page.split("## Metrics", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `corral_")]
    return {n for row in rows for n in re.findall(r"`(corral_\w+)`", row.split("|")[1])}


def test_the_metrics_table_is_what_a_scrape_shows(tmp_path: Path) -> None:
    exposed, documented = _exposed(tmp_path), _documented()
    assert sorted(exposed - documented) == [], "exposed but not in docs/server.md"
    assert sorted(documented - exposed) == [], "in docs/server.md but not exposed"
