"""Beyond one machine: deploy/kubernetes/ holds a worker Deployment per role and a
KEDA ScaledObject driven by corral_desired_workers{role} from /metrics, which is the
pools' own decision (corral.scaling.desired_workers). The manifests are validated
against the Kubernetes and KEDA schemas; the metric against the function."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import httpx
import kubernetes_validate
import pytest
import yaml
from cloudcoil.models.keda.v1alpha1 import ScaledObject
from prometheus_client.parser import text_string_to_metric_families

import corral
from corral.clock import FakeClock
from corral.scaling import desired_workers
from tests.support.backends.http import TOKEN, serving

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes"


def test_the_worker_deployment_is_valid_kubernetes() -> None:
    doc = yaml.safe_load((DEPLOY / "worker-developer.yaml").read_text())
    kubernetes_validate.validate(doc, "1.37.0", strict=True)
    worker = doc["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e for e in worker["env"]}
    assert env["CORRAL_ROLE"]["value"] == "developer"
    assert env["CORRAL_AGENT_ID"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert "CORRAL_TOKEN" not in env  # the worker has its node token, never the operator's
    assert worker["command"][:2] == ["corral", "worker"]


def test_a_bad_deployment_is_refused_by_the_validation() -> None:
    doc = yaml.safe_load((DEPLOY / "worker-developer.yaml").read_text())
    doc["spec"]["replicas"] = "many"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(doc, "1.37.0", strict=True)


def test_the_scaled_object_follows_corrals_recommendation_for_the_role() -> None:
    raw = yaml.safe_load((DEPLOY / "keda-scaledobject.yaml").read_text())
    so = ScaledObject.model_validate(raw)
    deployment = yaml.safe_load((DEPLOY / "worker-developer.yaml").read_text())
    assert so.spec.scale_target_ref.name == deployment["metadata"]["name"]
    (trigger,) = so.spec.triggers
    assert trigger.type == "prometheus"
    assert re.fullmatch(
        r'max\(corral_desired_workers\{role="developer"\}\)', trigger.metadata["query"]
    )
    assert trigger.metadata["threshold"] == "1"
    bad = {**raw, "spec": {**raw["spec"], "minReplicaCount": "none"}}
    with pytest.raises(ValueError):
        ScaledObject.model_validate(bad)


def _desired(text: str) -> dict[str, float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "corral_desired_workers":
                out[s.labels["role"]] = s.value
    return out


def test_metrics_publish_the_pools_decision_per_role(tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    assert promtool, "promtool is missing: apt-get install prometheus"
    with serving(tmp_path, clock=FakeClock()) as (url, _embedded):
        client = corral.connect(url, token=TOKEN)
        client.configure(max_agents=5)
        client.register_node("w1", "developer")
        client.add_tasks([{"title": f"implement {i}"} for i in range(6)])
        a = client.assess_workload()
        assert a.recommendation == "spawn_developer"
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}) as h:
            text = h.get("/metrics").text
        client.close()
    check = subprocess.run(
        [promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=30
    )
    assert check.returncode == 0, check.stdout + check.stderr
    got = _desired(text)
    want = desired_workers(
        "developer",
        workers=1,
        idle=1,
        recommendation="spawn_developer",
        pending=6,
        live=1,
        max_agents=5,
    )
    assert got["developer"] == want == 5  # 1 now, 4 more within max_agents
    assert got["architect"] == 0  # the recommendation is not the architect's
    assert "bootstrap_manager" not in got
