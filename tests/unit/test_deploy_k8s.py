"""deploy/kubernetes/: the three runner Deployments (notification, exploration,
hybrid) validated against Kubernetes' own schemas (kubernetes-validate), and the
KEDA ScaledObject against KEDA's model of its CRD (cloudcoil-models-keda), scaling on
a metric corral's /metrics really exports; examples/runners.toml, the same pools under
a supervisor."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from cloudcoil.models.keda.v1alpha1 import ScaledObject
from prometheus_client.parser import text_string_to_metric_families

import corral

DEPLOY = Path(__file__).parents[2] / "deploy" / "kubernetes"


def _docs(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((DEPLOY / name).read_text()) if d]


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value") for e in container.get("env", [])}


def test_the_runner_deployments_are_valid_kubernetes() -> None:
    version = kubernetes_validate.utils.latest_version()
    docs = _docs("runners.yaml")
    for doc in docs:
        kubernetes_validate.validate(doc, version, strict=True)
    by_mode = {}
    for doc in docs:
        assert doc["kind"] == "Deployment"
        (container,) = doc["spec"]["template"]["spec"]["containers"]
        mode = _env(container)["CORRAL_RUNNER_MODE"]
        assert doc["metadata"]["name"] == f"runner-{mode}"
        assert container["args"][:2] == ["corral", "runner"] and "--" in container["args"]
        by_mode[mode] = doc["spec"]["replicas"]
    assert by_mode == {"notification": 2, "exploration": 1, "hybrid": 2}


def test_a_bad_deployment_is_refused_by_the_validator() -> None:
    doc = _docs("runners.yaml")[0]
    doc["spec"]["replicas"] = "two"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(doc, kubernetes_validate.utils.latest_version(), strict=True)


def test_the_scaled_object_is_kedas_and_scales_on_corrals_metric(tmp_path: Path) -> None:
    (doc,) = _docs("runners-keda.yaml")
    model = ScaledObject.model_validate(doc)
    # every field is one KEDA knows: the model gives the document back whole
    assert model.model_dump(by_alias=True, exclude_none=True, exclude_unset=True) == doc
    spec = model.spec
    assert spec is not None and spec.scale_target_ref.name == "runner-notification"
    names = {d["metadata"]["name"] for d in _docs("runners.yaml")}
    assert spec.scale_target_ref.name in names
    (trigger,) = spec.triggers
    assert trigger.type == "prometheus"
    query = trigger.metadata["query"]
    from corral.server.metrics import Metrics

    with corral.connect(f"sqlite:///{tmp_path / 'c.db'}") as c:
        assert isinstance(c, corral.Cluster)  # a database URL gives the embedded client
        exported = {f.name for f in text_string_to_metric_families(Metrics(c).render().decode())}
    assert "corral_inbox_queue_depth" in exported
    assert "corral_inbox_queue_depth" in query


def test_the_supervisor_pool_example_is_a_valid_manifest_of_runners() -> None:
    """examples/runners.toml: a supervisor pool of runners, one per mode, each node id
    its manifest id."""
    from corral.cli import cli
    from corral.supervisor.manifest import load_manifest

    manifest = load_manifest(DEPLOY.parents[1] / "examples" / "runners.toml")
    modes = set()
    for spec in manifest.agents:
        args = list(spec.args)
        assert spec.cmd == "corral" and args[0] == "runner"
        assert args[args.index("--id") + 1] == spec.id
        modes.add(args[args.index("--mode") + 1])
        # the arguments parse as `corral runner`'s (up to the command)
        ctx = cli.commands["runner"].make_context("runner", args[1:], resilient_parsing=True)
        assert ctx.params["runner_id"] == spec.id
    assert modes == {"notification", "exploration", "hybrid"}
