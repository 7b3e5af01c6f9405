"""The cascade stop with real processes and signals: the last start phase first;
within a phase the agents nothing depends on stop together, then each agent others
depend on alone, in reverse manifest order, each waited for (up to its
``stop_timeout`` and the SIGKILL after it) before the next gets its signal."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.integration.test_supervisor_daemon import PY, make, manifest, st, supervise, until

# Notes "<name> <event> <time>" in argv[1]; on SIGTERM takes argv[3] s to exit (or
# ignores it when argv[3] is "ignore").
AGENT = (
    "import signal, sys, time\n"
    "out, name, linger = sys.argv[1], sys.argv[2], sys.argv[3]\n"
    "def note(what):\n"
    "    open(out, 'a').write(f'{name} {what} {time.time()}\\n')\n"
    "def term(sig, frame):\n"
    "    note('term')\n"
    "    if linger != 'ignore':\n"
    "        time.sleep(float(linger)); note('exit'); sys.exit(0)\n"
    "signal.signal(signal.SIGTERM, term)\n"
    "note('up')\n"
    "while True: time.sleep(1)\n"
)


def events(path: Path) -> dict[tuple[str, str], float]:
    out = {}
    for line in path.read_text().splitlines():
        name, what, ts = line.split()
        out[(name, what)] = float(ts)
    return out


def test_a_phase_stops_in_reverse_manifest_order_each_waited_for(tmp_path: Path) -> None:
    """relay and mint (phase 0), two users of both (phase 1). Shutdown: the users
    together; then mint, which ignores SIGTERM and is killed at its 0.6 s
    stop_timeout; only then relay gets SIGTERM (issue 26, defect 5)."""
    log = tmp_path / "events"

    def agent(name: str, linger: str, **kw: Any) -> dict[str, Any]:
        return {"id": name, "cmd": PY, "args": ["-c", AGENT, str(log), name, linger], **kw}

    agents = [
        agent("relay", "0.2"),
        agent("mint", "ignore", stop_timeout=0.6),
        agent("user1", "0.3", depends_on=["relay", "mint"]),
        agent("user2", "0.3", depends_on=["relay", "mint"]),
    ]
    sup = make(tmp_path, manifest(agents))

    async def scenario() -> None:
        await until(lambda: log.exists() and log.read_text().count(" up ") == 4, what="all up")

    supervise(sup, scenario)
    ev = events(log)
    mint_killed = st(sup, "mint")["last_exit"]["at"]
    assert st(sup, "mint")["last_exit"]["describe"] == "killed by SIGKILL"
    # the users stop together, before the infrastructure
    assert abs(ev[("user1", "term")] - ev[("user2", "term")]) < 0.25
    assert ev[("user1", "term")] < ev[("user2", "exit")]
    assert ev[("mint", "term")] >= max(ev[("user1", "exit")], ev[("user2", "exit")])
    # mint before relay, waited for: relay's signal comes after mint's SIGKILL
    assert mint_killed - ev[("mint", "term")] >= 0.55
    assert ev[("relay", "term")] >= mint_killed
    assert ("relay", "exit") in ev
    assert all(s["state"] == "STOPPED" for s in sup.status())
