"""``deploy/prometheus/alerts.yml``: valid rules (``promtool check rules``), over the
metrics ``/metrics`` exports (every name an expression reads is one a scrape shows),
and each rule fires on the series of its condition (``promtool test rules``).
promtool is Debian's prometheus package (scripts/test installs it); a test that finds
it missing fails."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import yaml

import corral
from corral.cluster import Cluster
from corral.server.metrics import Metrics

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "alerts.yml"


def _promtool() -> str:
    promtool = shutil.which("promtool")
    assert promtool, "promtool is missing: apt-get install prometheus"
    return promtool


def _rules() -> list[dict[str, object]]:
    doc = yaml.safe_load(RULES.read_text())
    return [rule for group in doc["groups"] for rule in group["rules"]]


def test_promtool_checks_the_rules() -> None:
    check = subprocess.run(
        [_promtool(), "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60
    )
    assert check.returncode == 0, check.stdout + check.stderr
    assert "SUCCESS: 6 rules found" in check.stdout


def test_the_rules_read_only_metrics_the_server_exports(tmp_path: Path) -> None:
    with corral.connect(f"sqlite:///{tmp_path / 'c.db'}") as c:
        assert isinstance(c, Cluster)
        text = Metrics(c).render().decode()
    families = set(re.findall(r"^# TYPE (\S+) (\S+)$", text, flags=re.MULTILINE))
    exported = {name for name, _ in families}
    histograms = {name for name, kind in families if kind == "histogram"}
    exported |= {f"{h}_{s}" for h in histograms for s in ("bucket", "sum", "count")}
    read = {name for rule in _rules() for name in re.findall(r"\b(corral_\w+)", str(rule["expr"]))}
    assert len(read) == 6
    assert sorted(read - exported) == []


# The series of each condition, one per alert, and the alert they raise (promtool's
# unit test format); the thresholds are the rules' (the alert settings' defaults).
_TESTS = """
rule_files: [{rules}]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'corral_task_lease_recoveries_total{{role="developer", instance="a"}}'
        values: '0 0 1 1 1'
      - series: 'corral_task_lease_recoveries_total{{role="developer", instance="b"}}'
        values: '0 0 1 1 1'
      - series: 'corral_tasks_failed_total{{role="architect"}}'
        values: '0 0 0 2 2'
      - series: 'corral_process_restart_exhausted{{host="h1", agent="relay"}}'
        values: '0 0 1 1 1'
      - series: 'corral_process_restarts_total{{host="h1", agent="w"}}'
        values: '0 1 2 3 4 5 6'
      - series: 'corral_spawn_request_oldest_pending_age_seconds'
        values: '0 600 960 1020 0'
      - series: 'corral_workflow_runs_past_deadline'
        values: '0 0 0 1 0'
    alert_rule_test:
      - eval_time: 1m
        alertname: CorralNodeDeadHoldingLease
        exp_alerts: []
      - eval_time: 3m
        alertname: CorralNodeDeadHoldingLease
        exp_alerts:
          - exp_labels: {{severity: warning, role: developer}}
            exp_annotations:
              summary: A node of role developer died holding a task
              description: >-
                The monitor took back 1 leases of dead nodes in the last 5 minutes
                (their events: GET /v1/events?kind=lease_recovered).
      - eval_time: 3m
        alertname: CorralTaskFailed
        exp_alerts:
          - exp_labels: {{severity: warning, role: architect}}
            exp_annotations:
              summary: A task of role architect failed for good
              description: >-
                2 architect tasks failed with no attempts left in the last 5 minutes
                (corral task list --status failed).
      - eval_time: 2m
        alertname: CorralAgentRestartExhausted
        exp_alerts:
          - exp_labels: {{severity: critical, host: h1, agent: relay}}
            exp_annotations:
              summary: Agent relay on h1 used up its restarts
              description: >-
                The supervisor gave up restarting it (restart-exhausted); corral ctl
                start relay on that host starts it again.
      - eval_time: 3m
        alertname: CorralCrashLoop
        exp_alerts: []
      - eval_time: 6m
        alertname: CorralCrashLoop
        exp_alerts:
          - exp_labels: {{severity: warning, host: h1, agent: w}}
            exp_annotations:
              summary: Agent w on h1 is in a crash loop
              description: >-
                6 restarts in the last 10 minutes; corral ctl logs w --stderr shows why.
      - eval_time: 1m
        alertname: CorralSpawnRequestPending
        exp_alerts: []
      - eval_time: 2m
        alertname: CorralSpawnRequestPending
        exp_alerts:
          - exp_labels: {{severity: warning}}
            exp_annotations:
              summary: A spawn request has waited more than 15 minutes for an answer
              description: >-
                The oldest pending spawn request is 16m 0s old (corral ctl requests;
                accept or decline it).
      - eval_time: 4m
        alertname: CorralSpawnRequestPending
        exp_alerts: []
      - eval_time: 2m
        alertname: CorralWorkflowPastDeadline
        exp_alerts: []
      - eval_time: 3m
        alertname: CorralWorkflowPastDeadline
        exp_alerts:
          - exp_labels: {{severity: warning}}
            exp_annotations:
              summary: Idle workflow runs are past their deadline
              description: >-
                1 idle workflow runs wait past their earliest waiter's deadline (corral
                workflows list --idle).
"""


def test_each_rule_fires_on_its_condition(tmp_path: Path) -> None:
    """Two servers exposing the same recovery raise one alert (the max, not the sum);
    a crash loop needs 5 restarts within 10 minutes; the others follow their gauge."""
    tests = tmp_path / "alerts_test.yml"
    tests.write_text(_TESTS.format(rules=RULES))
    run = subprocess.run(
        [_promtool(), "test", "rules", str(tests)], capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stdout + run.stderr
