"""Long-running commands say what they do: ``corral runner``, ``corral supervise`` and
``corral workflows serve`` print a timestamped line on stderr per activation or state
change (``-q``: warnings only; ``--json``: one JSON object per line), and a runner
keeps its activation command's output. Real processes, real stores."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import corral
from tests.support.fleet_up import wait_for

CORRAL = [sys.executable, "-m", "corral"]
STAMP = re.compile(r"^\d\d:\d\d:\d\d ")

ACTIVATE = (
    "import json, sys; a = json.load(sys.stdin); "
    "print('looked at ' + a['agent_id'], file=sys.stderr); print('thinking'); "
    "print(json.dumps({'posts': 1}))"
)


def _runner(url: str, *flags: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CORRAL_URL": url}
    return subprocess.run(
        [
            *CORRAL,
            "runner",
            "--id",
            "r1",
            "--mode",
            "exploration",
            "--max-activations",
            "2",
            *flags,
            "--",
            sys.executable,
            "-c",
            ACTIVATE,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_corral_runner_prints_each_activation_and_keeps_its_commands_output(
    tmp_path: Path,
) -> None:
    """Two activations: a line when each begins and when it is released (with its
    outcome), each line timestamped; the command's stderr and its stdout but the
    outcome line are kept (they were thrown away when it succeeded)."""
    url = f"sqlite:///{tmp_path / 'c.db'}"
    with corral.connect(url) as c:
        c.add_agent("persona")
        c.add_agent("critic")
    done = _runner(url)
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert lines and all(STAMP.match(x) for x in lines), done.stderr
    begun = [x for x in lines if re.search(r"activation \d+: \w+ \(discovery\)$", x)]
    released = [
        x for x in lines if re.search(r'activation \d+ released in [\d.]+ s: \{"posts": 1', x)
    ]
    assert len(begun) == 2 and len(released) == 2, done.stderr
    for agent in ("persona", "critic"):
        assert any(x.endswith(f"stderr: looked at {agent}") for x in lines), done.stderr
    assert sum(x.endswith("stdout: thinking") for x in lines) == 2, done.stderr
    assert not any('stdout: {"posts"' in x for x in lines)  # the outcome is the released line's


def test_corral_runner_json_and_quiet(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'c.db'}"
    with corral.connect(url) as c:
        c.add_agent("persona")
    done = _runner(url, "--json")
    assert done.returncode == 0, done.stderr
    records = [json.loads(x) for x in done.stderr.splitlines()]
    actions = [r["action"] for r in records]
    assert "activation_started" in actions and "activation_released" in actions
    rel = next(r for r in records if r["action"] == "activation_released")
    assert rel["agent"] == "persona" and rel["outcome"]["posts"] == 1 and rel["ts"] > 0
    quiet = _runner(url, "-q")
    assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr


class Daemon:
    """A daemon whose stderr lines are kept as they come."""

    def __init__(self, argv: list[str], cwd: Path, **env: str) -> None:
        e = {
            k: v
            for k, v in os.environ.items()
            if k not in ("CORRAL_SUPERVISOR", "CORRAL_AGENT_ID", "CORRAL_TOKEN")
        }
        e.update(env)
        self.proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env=e,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))

    def has(self, pattern: str) -> list[str]:
        return [x for x in list(self.lines) if re.search(pattern, x)]

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(30)
        finally:
            self._reader.join(5)
            if self.proc.stderr is not None:
                self.proc.stderr.close()


MANIFEST = """
[[agents]]
id = "steady"
cmd = "sleep"
args = ["60"]

[[agents]]
id = "crashy"
cmd = "sh"
args = ["-c", "sleep 0.3; exit 3"]
"""


@pytest.mark.parametrize("flag", ["", "-q", "--json"])
def test_corral_supervise_prints_each_state_change(tmp_path: Path, flag: str) -> None:
    """A line per transition as state.log records it (the supervisor printed nothing):
    started, running, a crash as a warning; -q only the warnings; --json objects."""
    (tmp_path / "fleet.toml").write_text(MANIFEST)
    argv = [*CORRAL, "supervise", "fleet.toml", "--state-dir", "st", *([flag] if flag else [])]
    d = Daemon(argv, tmp_path)
    try:
        wait_for(lambda: d.has("crashy") and d.has("UNHEALTHY"), 30, "the crash's line")
        if flag == "":
            wait_for(lambda: d.has(r"steady: \S+ -> RUNNING"), 10, "steady running")
            assert all(STAMP.match(x) for x in d.lines), d.lines
            assert d.has(r"^\d\d:\d\d:\d\d corral-supervise: warning: crashy: \w+ -> UNHEALTHY")
        elif flag == "-q":
            assert all("UNHEALTHY" in x or "exhausted" in x for x in d.lines), d.lines
        else:
            records = [json.loads(x) for x in d.lines]
            assert all(r["action"] == "state" for r in records), records
            bad = [r for r in records if r["to"] == "UNHEALTHY"]
            assert bad and bad[0]["agent"] == "crashy" and bad[0]["level"] == "warning"
    finally:
        assert d.stop() == 0
    if flag == "":
        assert d.has(r"steady: RUNNING -> STOPPED"), d.lines  # the way out too


ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_workflows_serve_prints_each_runs_steps_and_send_prints_the_resumed_run(
    tmp_path: Path,
) -> None:
    """A run started, idle (waiting for Answer), released, restored by an event and
    completed: a line each on the host's stderr (it printed nothing). ``corral
    workflows send`` to the released run prints it once resumed (it printed it as
    it was before the resume: released)."""
    url = f"sqlite:///{tmp_path / 'wf.db'}"
    with corral.connect(url) as c:
        c.configure(idle_release_after=0.3)
    d = Daemon(
        [
            *CORRAL,
            "--url",
            url,
            "workflows",
            "serve",
            "tests.support.workflow_app:hitl",
            "--host",
            "h1",
        ],
        ROOT,
    )
    try:
        wait_for(lambda: d.has("host h1 serves hitl"), 30, "the host's first line")
        with corral.connect(url) as c:
            handler_id = c.run_workflow("hitl", topic="t")
            wait_for(lambda: c.get_handler(handler_id).status == "released", 30, "released")
        sent = subprocess.run(
            [
                *CORRAL,
                "--url",
                url,
                "workflows",
                "send",
                handler_id,
                "Answer",
                "--data",
                '{"text": "yes"}',
                "--json",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert sent.returncode == 0, sent.stderr
        shown = json.loads(sent.stdout)
        assert shown["status"] in ("running", "completed"), shown
        assert shown["resumes"] == 1, shown
        wait_for(lambda: d.has(f"run {handler_id} \\(hitl\\) completed"), 30, "completed")
        for step in ("started", "idle, waits for Answer", "released", "restored"):
            assert d.has(f"run {handler_id} \\(hitl\\) {step}"), (step, d.lines)
        assert all(STAMP.match(x) for x in d.lines), d.lines
    finally:
        assert d.stop() == 0
