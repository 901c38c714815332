"""The kustomize base of the installed surfaces: which files, holding which objects.

``render(surfaces, image=..., version=...)`` is pure: the same surfaces, image and
version give the same bytes, so the committed ``deploy/kubernetes/base/`` can be held
equal to it by a test. :func:`write` puts the files in a directory (and removes worker
files of surfaces no longer installed); :func:`stream` is the same objects as one
multi-document YAML stream.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from dataplane.deploy.console import console_objects
from dataplane.deploy.manifests import (
    NAME,
    Obj,
    WorkerSpec,
    bff_objects,
    capcom_objects,
    migrate_job,
)
from dataplane.deploy.policies import network_policies
from dataplane.deploy.workers import (
    scaled_object,
    trigger_authentication,
    worker_deployment,
)
from dataplane.deploy.yaml import dump, dump_all
from dataplane.surfaces.manifest import Surface

WORKERS_DIR = "workers"
HEADER = "# Rendered by `dataplane deploy render`: edit the generator or an overlay, not this.\n"


def plan(surfaces: Mapping[str, Surface]) -> list[WorkerSpec]:
    """A worker per surface and tier (live, then dev), surfaces in id order."""
    return [
        WorkerSpec(sid, dev, surfaces[sid].needs_client_db)
        for sid in sorted(surfaces)
        for dev in (False, True)
    ]


def render(surfaces: Mapping[str, Surface], *, image: str, version: str) -> dict[str, list[Obj]]:
    """``{relative file name: its objects}``, ``kustomization.yaml`` excluded."""
    files: dict[str, list[Obj]] = {
        "migrate.yaml": [migrate_job(image, version)],
        "bff.yaml": bff_objects(image),
        "capcom.yaml": capcom_objects(image),
        "console.yaml": console_objects(image),
        "keda.yaml": [trigger_authentication()],
        "network-policy.yaml": network_policies(),
    }
    for spec in plan(surfaces):
        files[f"{WORKERS_DIR}/{spec.queue_type}.yaml"] = [
            worker_deployment(spec, image),
            scaled_object(spec),
        ]
    return files


def kustomization(files: Mapping[str, list[Obj]]) -> Obj:
    return {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "labels": [{"pairs": {"app.kubernetes.io/part-of": NAME}}],
        "resources": list(files),
    }


def texts(files: Mapping[str, list[Obj]]) -> dict[str, str]:
    """Each file's YAML, ``kustomization.yaml`` included."""
    out = {name: HEADER + dump_all(objects) for name, objects in files.items()}
    out["kustomization.yaml"] = HEADER + dump(kustomization(files))
    return out


def write(files: Mapping[str, list[Obj]], out: Path) -> list[Path]:
    """Write the base into ``out``; worker files of surfaces not rendered are removed."""
    rendered = texts(files)
    stale = out.glob(f"{WORKERS_DIR}/*.yaml") if out.is_dir() else iter(())
    for path in stale:
        if path.relative_to(out).as_posix() not in rendered:
            path.unlink()
    written = []
    for name, text in rendered.items():
        path = out / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        written.append(path)
    return written


def stream(files: Mapping[str, list[Obj]]) -> str:
    """Every object as one multi-document YAML stream (``kubectl apply -f -``)."""
    return dump_all([obj for objects in files.values() for obj in objects])
