"""`dataplane deploy render`: the committed base is the render of the plane's own surfaces,
and what it renders is hardened, references its credentials, and scales each surface's
tiers as promised. A surface a user installs next to the plane is in their render, and
leaves this file green."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from dataplane import __version__
from dataplane.bff.config import SSE_DEADLINE_SECONDS
from dataplane.deploy.command import DEFAULT_IMAGE
from dataplane.deploy.render import render, texts
from dataplane.deploy.yaml import dump
from dataplane.surfaces import SurfacesConfig
from dataplane.surfaces.registry import load_registry
from dataplane.surfaces.scaffold import scaffold

ROOT = Path(__file__).resolve().parents[2]
BASE = ROOT / "deploy" / "kubernetes" / "base"
CREDENTIAL = re.compile(r"URL|SECRET|TOKEN|KEY|PASSWORD")
#: What the committed base is rendered from: this repository's surfaces (examples/lms),
#: named, so that whatever else is installed in the venv stays out of it.
PLANE_SURFACES = "dataplane_lms:PACKAGE"
RERENDER = f"DATAPLANE_SURFACES={PLANE_SURFACES} dataplane deploy render --out " + str(
    BASE.relative_to(ROOT)
)
ADVICE = (
    "the committed base is the render of the plane's own surfaces (examples/lms). "
    f"If you changed the generator or examples/lms, re-render it: {RERENDER}. "
    "Your own surfaces belong in your own render (docs/deploy-kubernetes.md, "
    '"Render it for your surfaces"), not in this base.'
)


def plane(probe: bool = False) -> dict[str, Any]:
    """The plane's own surfaces (``probe`` when asked), whatever else is installed."""
    return SurfacesConfig(probe_enabled=probe, modules=PLANE_SURFACES).registry().surfaces


def installed() -> dict[str, Any]:
    """What the entry points register: the plane's surfaces and a user's, as deployed."""
    return SurfacesConfig().registry().surfaces


def objects(probe: bool = False) -> list[dict[str, Any]]:
    files = render(plane(probe), image=DEFAULT_IMAGE, version=__version__)
    return [obj for objs in files.values() for obj in objs]


def cli_env(**extra: str) -> dict[str, str]:
    """A bare environment for the CLI, on this interpreter's path (PYTHONPATH kept, so it
    runs the code under test)."""
    env = {"PATH": str(Path(sys.executable).parent), "DATAPLANE_PROBE": "0", **extra}
    if os.environ.get("PYTHONPATH"):
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    return env


def pods(objs: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    return [
        (o["metadata"]["name"], o["spec"]["template"]["spec"])
        for o in objs
        if o["kind"] in ("Deployment", "Job")
    ]


def test_the_committed_base_is_the_render() -> None:
    rendered = texts(render(plane(), image=DEFAULT_IMAGE, version=__version__))
    committed = {
        p.relative_to(BASE).as_posix(): p.read_text() for p in BASE.rglob("*.yaml") if p.is_file()
    }
    assert sorted(committed) == sorted(rendered), ADVICE
    for name, text in rendered.items():
        assert committed[name] == text, f"{name} differs from the render: {ADVICE}"


def test_the_cli_writes_the_same_files(tmp_path: Path) -> None:
    env = cli_env(DATAPLANE_SURFACES=PLANE_SURFACES)
    subprocess.run(
        [sys.executable, "-m", "dataplane", "deploy", "render", "--out", str(tmp_path)],
        env=env,
        check=True,
        capture_output=True,
        timeout=60,
    )
    for path in BASE.rglob("*.yaml"):
        assert (tmp_path / path.relative_to(BASE)).read_text() == path.read_text()
    stream = subprocess.run(
        [sys.executable, "-m", "dataplane", "deploy", "render", "--image", "r.example/dp:9"],
        env=env,
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    docs = list(yaml.safe_load_all(stream))
    assert len(docs) == len(objects())
    assert {c["image"] for _, p in pods(docs) for c in p["containers"]} == {"r.example/dp:9"}


@pytest.fixture
def users_surface(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The tutorial's ``dataplane new-surface orders && pip install -e orders-surface``:
    the scaffolded package on the path with its distribution's metadata (what an editable
    install leaves), so ``importlib.metadata`` finds its ``dataplane.surfaces`` entry
    point; on PYTHONPATH too, for the CLI's process."""
    root = scaffold("orders", tmp_path)
    info = root / "orders_surface-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: orders-surface\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text(
        "[dataplane.surfaces]\norders = orders_surface:SURFACE\n"
    )
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))
    )
    load_registry.cache_clear()
    yield root
    load_registry.cache_clear()
    sys.modules.pop("orders_surface", None)


def test_a_users_own_surface_is_in_their_render_and_leaves_the_base_check_green(
    users_surface: Path, tmp_path: Path
) -> None:
    assert "orders" in installed() and "orders" not in plane()
    mine = tmp_path / "mine"
    subprocess.run(
        [sys.executable, "-m", "dataplane", "deploy", "render", "--out", str(mine)],
        env=cli_env(),
        check=True,
        capture_output=True,
        timeout=60,
    )
    workers = {p.name for p in (mine / "workers").glob("*.yaml")}
    assert {"surface-orders.yaml", "surface-orders-dev.yaml"} <= workers
    assert "workers/surface-orders.yaml" in (mine / "kustomization.yaml").read_text()
    test_the_committed_base_is_the_render()
    test_the_cli_writes_the_same_files(tmp_path / "plane")
    test_one_worker_per_surface_and_tier_and_dev_tiers_scale_to_zero()


def test_the_yaml_reads_back_as_the_objects() -> None:
    for obj in objects(probe=True):
        assert yaml.safe_load(dump(obj)) == obj
    tricky = {"a": ["yes", "no", "on", "1", "0.5", "-x", "x: y", "#c", "", "a\nb", "é", "null"]}
    assert yaml.safe_load(dump(tricky)) == tricky
    with pytest.raises(TypeError):
        dump({"x": 0.5})


def test_one_worker_per_surface_and_tier_and_dev_tiers_scale_to_zero() -> None:
    objs = objects(probe=True)
    surfaces = plane(probe=True)
    workers = {
        o["metadata"]["labels"]["dataplane.dev/queue-type"]: o
        for o in objs
        if o["kind"] == "Deployment"
        and o["metadata"]["labels"]["app.kubernetes.io/component"] == "worker"
    }
    expected = {f"surface-{s}{t}" for s in surfaces for t in ("", "-dev")}
    assert set(workers) == expected
    scaled = {o["spec"]["scaleTargetRef"]["name"]: o for o in objs if o["kind"] == "ScaledObject"}
    for queue_type, deployment in workers.items():
        env = {e["name"]: e for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
        assert env["SURFACE_QUEUE_TYPE"]["value"] == queue_type
        assert env["DATAPLANE_METRICS_HOST"]["value"] == "0.0.0.0"
        assert ("DATAPLANE_CLIENT_DB_URL" in env) == surfaces[
            queue_type.split("-")[1]
        ].needs_client_db
        so = scaled[deployment["metadata"]["name"]]["spec"]
        assert so["minReplicaCount"] == (0 if queue_type.endswith("-dev") else 1)
        trigger = so["triggers"][0]
        assert trigger["type"] == "postgresql"
        assert trigger["metadata"]["query"] == f"SELECT maestro_queue_depth('{queue_type}')"
    assert "DATAPLANE_CLIENT_DB_URL" not in str(
        workers["surface-probe"]
    )  # probe needs no client DB


def test_every_pod_is_hardened_and_writes_only_tmp() -> None:
    for name, pod in pods(objects()):
        assert pod["securityContext"]["runAsNonRoot"] is True, name
        assert pod["securityContext"]["runAsUser"] == 10001, name
        assert pod["automountServiceAccountToken"] is False, name
        for c in pod["containers"]:
            sc = c["securityContext"]
            assert sc["readOnlyRootFilesystem"] is True, name
            assert sc["allowPrivilegeEscalation"] is False, name
            assert sc["capabilities"] == {"drop": ["ALL"]}, name
            assert c["volumeMounts"] == [{"name": "tmp", "mountPath": "/tmp"}], name
            assert c["resources"]["requests"]["memory"] and c["resources"]["limits"]["memory"]
        assert pod["volumes"] == [{"name": "tmp", "emptyDir": {"sizeLimit": "256Mi"}}], name


def test_credentials_are_referenced_never_embedded() -> None:
    objs = objects(probe=True)
    assert not [o for o in objs if o["kind"] in ("Secret", "ConfigMap")]
    for name, pod in pods(objs):
        for c in pod["containers"]:
            for e in c["env"]:
                if CREDENTIAL.search(e["name"]) and e["name"] != "DATAPLANE_CAPCOM_URL":
                    assert "value" not in e and "secretKeyRef" in e["valueFrom"], (name, e)
    auth = [o for o in objs if o["kind"] == "TriggerAuthentication"]
    assert auth[0]["spec"]["secretTargetRef"][0]["parameter"] == "connection"
    assert "postgres" not in yaml.safe_dump(objs).replace("postgresql", "")


def test_the_bff_drains_past_the_sse_deadline() -> None:
    objs = objects()
    bff = next(
        o for o in objs if o["kind"] == "Deployment" and o["metadata"]["name"].endswith("bff")
    )
    pod = bff["spec"]["template"]["spec"]
    c = pod["containers"][0]
    env = {e["name"]: e.get("value") for e in c["env"]}
    grace = float(env["DATAPLANE_SHUTDOWN_GRACE_SECONDS"])
    assert grace > SSE_DEADLINE_SECONDS
    prestop = int(c["lifecycle"]["preStop"]["exec"]["command"][1])
    assert pod["terminationGracePeriodSeconds"] > prestop + grace
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert bff["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    kinds = {o["kind"] for o in objs if o["metadata"]["name"] == "dataplane-bff"}
    assert kinds == {
        "Deployment",
        "Service",
        "PodDisruptionBudget",
        "HorizontalPodAutoscaler",
        "NetworkPolicy",
    }
