"""The Kubernetes objects of a fleet, as plain mappings (written by :mod:`.render`).

What is rendered, for an image and the installed surfaces:

* a migration Job (``dataplane migrate``; named after the version, so an upgrade
  applies a new Job instead of editing a finished one);
* the BFF: Deployment, Service, PodDisruptionBudget and a CPU HorizontalPodAutoscaler.
  Readiness is ``/readyz``; a preStop pause lets endpoints drop the pod before
  SIGTERM; the shutdown grace is above the SSE deadline, so an open stream ends
  with its answer (or its TIMEOUT) rather than being cut;
* one worker Deployment per surface and tier (``surface-<id>`` and
  ``surface-<id>-dev``), probed on its metrics port, with a KEDA ScaledObject on the
  PostgreSQL scaler over ``maestro_queue_depth`` (migration 0011): live tiers keep
  one replica, dev tiers may scale to zero;
* capcom (the telemetry receiver): Deployment and Service;
* the operators' console: Deployment and ClusterIP Service (:mod:`dataplane.deploy.console`);
* a NetworkPolicy per component (:mod:`dataplane.deploy.policies`).

Credentials are only referenced (``secretKeyRef``; :data:`SECRETS` names them),
never written here. Every pod runs as uid 10001, non-root, with a read-only root
filesystem, no privilege escalation, no capabilities, and ``/tmp`` an emptyDir.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dataplane.bff.config import SSE_DEADLINE_SECONDS
from dataplane.queue.types import DEV_SUFFIX, PREFIX
from dataplane.worker.config import SHUTDOWN_GRACE_SECONDS

Obj = dict[str, Any]

NAME = "dataplane"
UID = 10001  # the image's user (deploy/Containerfile)
BFF_PORT = 8000
CAPCOM_PORT = 8001
METRICS_PORT = 9100  # the worker's /healthz, /readyz and /metrics
POSTGRES_PORT = 5432
PRESTOP_SECONDS = 5  # endpoints drop a terminating pod before it stops listening
# The BFF's drain outlasts the SSE deadline: a stream in flight ends by itself.
BFF_DRAIN_SECONDS = int(SSE_DEADLINE_SECONDS) + 5
BFF_TERMINATION_SECONDS = PRESTOP_SECONDS + BFF_DRAIN_SECONDS + 10
WORKER_TERMINATION_SECONDS = int(SHUTDOWN_GRACE_SECONDS) + 15
BFF_REPLICAS = (2, 10)  # HPA minimum and maximum
BFF_CPU_TARGET = 70  # percent of the request
WORKER_MAX_REPLICAS = 10
KEDA_POLLING_SECONDS = 15
KEDA_COOLDOWN_SECONDS = 300
TMP_SIZE = "256Mi"  # the /tmp emptyDir: HOME, TMPDIR (nothing large is written)

# Requests and memory limits from bench/fleet_resources.py (figures and reasoning in
# docs/deploy-kubernetes.md, "Resources"): memory requests ~20 % above the peak RSS
# measured under load; limits leave room for what that load does not show (the BFF's
# waiting streams, a worker's large results). No CPU limit: a throttled BFF or worker
# misses its heartbeats and its SSE keep-alives; the CPU request is what the HPA and
# the scheduler count.
RESOURCES: dict[str, Obj] = {
    "bff": {"requests": {"cpu": "250m", "memory": "128Mi"}, "limits": {"memory": "512Mi"}},
    "worker": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "320Mi"}},
    "capcom": {"requests": {"cpu": "50m", "memory": "96Mi"}, "limits": {"memory": "192Mi"}},
    "migrate": {"requests": {"cpu": "50m", "memory": "96Mi"}, "limits": {"memory": "192Mi"}},
    # Not measured by bench/fleet_resources.py: capcom's figures plus its templates and
    # the wallboard's streams (64 at most), for a few operators.
    "console": {"requests": {"cpu": "50m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}},
}

# Secret name -> keys, as the manifests reference them (a key marked optional may be absent).
SECRETS: dict[str, dict[str, str]] = {
    # One queue-DB login per kind of process (docs/design.md, "Roles"): the schema's
    # owner for the migration Job alone, each other a member of its group role only.
    "dataplane-queue-db-owner": {"url": "queue DB DSN of the schema's owner (migration Job)"},
    "dataplane-queue-db-bff": {"url": "queue DB DSN of a login in dataplane_bff"},
    "dataplane-queue-db-worker": {"url": "queue DB DSN of a login in dataplane_worker"},
    "dataplane-queue-db-capcom": {"url": "queue DB DSN of a login in dataplane_capcom"},
    "dataplane-queue-db-console": {"url": "queue DB DSN of a login in dataplane_operator"},
    "dataplane-queue-db-scaler": {"url": "queue DB DSN of a login in dataplane_scaler (KEDA)"},
    "dataplane-client-db": {"url": "read-only client DB DSN (workers of client-DB surfaces)"},
    "dataplane-bff": {
        "jwt-secret": "optional: HS256 secret (DATAPLANE_JWT_SECRET)",
        "jwt-public-key": "optional: PEM public key (DATAPLANE_JWT_PUBLIC_KEY)",
        "stream-secret": "optional: stream/poll URL token key (DATAPLANE_STREAM_SECRET)",
    },
    # Required: /metrics of the BFF, capcom and every worker answers only with it
    # (the example overlay generates it: deploy/kubernetes/overlays/example/init-secrets).
    "dataplane-metrics": {"token": "bearer token a scraper of /metrics sends"},
    # Required: the console's CSRF key, shared by its replicas (the example overlay
    # generates it beside the metrics token).
    "dataplane-console": {"csrf-secret": "DATAPLANE_CONSOLE_SECRET, random (the CSRF key)"},
    "dataplane-shared": {
        "notify-secret": "optional: DATAPLANE_NOTIFY_SECRET (BFF and workers)",
        "capcom-token": "optional: DATAPLANE_CAPCOM_TOKEN (workers and capcom)",
    },
}


@dataclass(frozen=True, slots=True)
class WorkerSpec:
    """One worker Deployment: a surface on a tier."""

    surface: str
    dev: bool
    needs_client_db: bool

    @property
    def queue_type(self) -> str:
        return f"{PREFIX}{self.surface}{DEV_SUFFIX if self.dev else ''}"

    @property
    def name(self) -> str:
        # Surface ids are [a-z][a-z0-9_]* (at most 42): '_' -> '-' keeps names distinct.
        return f"{NAME}-worker-{self.surface.replace('_', '-')}{'-dev' if self.dev else ''}"


def labels(component: str, **extra: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": NAME, "app.kubernetes.io/component": component, **extra}


def from_secret(var: str, secret: str, key: str, *, optional: bool = False) -> Obj:
    ref: Obj = {"name": secret, "key": key}
    if optional:
        ref["optional"] = True
    return {"name": var, "valueFrom": {"secretKeyRef": ref}}


def plain_env(pairs: dict[str, str]) -> list[Obj]:
    return [{"name": k, "value": v} for k, v in pairs.items()]


def http_probe(path: str, port: str, *, period: int, failures: int) -> Obj:
    return {
        "httpGet": {"path": path, "port": port},
        "periodSeconds": period,
        "timeoutSeconds": 3,
        "failureThreshold": failures,
    }


def hardened_container(role: str, args: list[str], env: list[Obj], image: str) -> Obj:
    return {
        "name": role,
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "args": args,
        "env": env,
        "resources": RESOURCES[role],
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
    }


def pod_template(
    component: str, container: Obj, *, grace: int, restart: str = "Always", **meta: str
) -> Obj:
    return {
        "metadata": {"labels": labels(component, **meta)},
        "spec": {
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "restartPolicy": restart,
            "terminationGracePeriodSeconds": grace,
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": UID,
                "runAsGroup": UID,
                "fsGroup": UID,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [container],
            "volumes": [{"name": "tmp", "emptyDir": {"sizeLimit": TMP_SIZE}}],
        },
    }


def metadata(name: str, component: str, **extra: str) -> Obj:
    return {"name": name, "labels": labels(component, **extra)}


def queue_db_env(login: str) -> Obj:
    """``MAESTRO_QUEUES_URL`` from the Secret of ``login`` (``owner``, ``bff``, ...)."""
    return from_secret("MAESTRO_QUEUES_URL", f"dataplane-queue-db-{login}", "url")


def metrics_token_env() -> Obj:
    return from_secret("DATAPLANE_METRICS_TOKEN", "dataplane-metrics", "token")


def migrate_job(image: str, version: str) -> Obj:
    container = hardened_container("migrate", ["migrate"], [queue_db_env("owner")], image)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata(f"{NAME}-migrate-{version.replace('.', '-')}", "migrate"),
        "spec": {
            "backoffLimit": 4,
            "activeDeadlineSeconds": 600,
            "template": pod_template("migrate", container, grace=30, restart="Never"),
        },
    }


def _bff_deployment(image: str) -> Obj:
    env = [
        queue_db_env("bff"),
        from_secret("DATAPLANE_JWT_SECRET", "dataplane-bff", "jwt-secret", optional=True),
        from_secret("DATAPLANE_JWT_PUBLIC_KEY", "dataplane-bff", "jwt-public-key", optional=True),
        from_secret("DATAPLANE_STREAM_SECRET", "dataplane-bff", "stream-secret", optional=True),
        from_secret("DATAPLANE_NOTIFY_SECRET", "dataplane-shared", "notify-secret", optional=True),
        metrics_token_env(),  # /metrics is on the public port: a scraper sends the token
        *plain_env(
            {
                "DATAPLANE_BIND": f"0.0.0.0:{BFF_PORT}",
                "DATAPLANE_SHUTDOWN_GRACE_SECONDS": str(BFF_DRAIN_SECONDS),
                "DATAPLANE_SSE_DEADLINE_SECONDS": str(int(SSE_DEADLINE_SECONDS)),
                "DATAPLANE_METRICS": "1",
                "DATAPLANE_LOG_FORMAT": "json",
            }
        ),
    ]
    container = hardened_container("bff", ["bff"], env, image)
    container["ports"] = [{"name": "http", "containerPort": BFF_PORT}]
    container["readinessProbe"] = http_probe("/readyz", "http", period=5, failures=2)
    container["livenessProbe"] = http_probe("/healthz", "http", period=10, failures=3)
    container["lifecycle"] = {"preStop": {"exec": {"command": ["sleep", str(PRESTOP_SECONDS)]}}}
    pod = pod_template("bff", container, grace=BFF_TERMINATION_SECONDS)
    pod["spec"]["topologySpreadConstraints"] = [
        {
            "maxSkew": 1,
            "topologyKey": "kubernetes.io/hostname",
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": labels("bff")},
        }
    ]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata(f"{NAME}-bff", "bff"),
        "spec": {
            "replicas": BFF_REPLICAS[0],
            "selector": {"matchLabels": labels("bff")},
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1},
            },
            "template": pod,
        },
    }


def bff_objects(image: str) -> list[Obj]:
    name = f"{NAME}-bff"
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(name, "bff"),
        "spec": {
            "selector": labels("bff"),
            "ports": [{"name": "http", "port": 80, "targetPort": "http"}],
        },
    }
    pdb = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": metadata(name, "bff"),
        "spec": {"minAvailable": 1, "selector": {"matchLabels": labels("bff")}},
    }
    hpa = {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": metadata(name, "bff"),
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
            "minReplicas": BFF_REPLICAS[0],
            "maxReplicas": BFF_REPLICAS[1],
            "metrics": [
                {
                    "type": "Resource",
                    "resource": {
                        "name": "cpu",
                        "target": {"type": "Utilization", "averageUtilization": BFF_CPU_TARGET},
                    },
                }
            ],
        },
    }
    return [_bff_deployment(image), service, pdb, hpa]


def capcom_objects(image: str) -> list[Obj]:
    name = f"{NAME}-capcom"
    env = [
        queue_db_env("capcom"),
        metrics_token_env(),
        from_secret("DATAPLANE_CAPCOM_TOKEN", "dataplane-shared", "capcom-token", optional=True),
        *plain_env(
            {"DATAPLANE_CAPCOM_BIND": f"0.0.0.0:{CAPCOM_PORT}", "DATAPLANE_LOG_FORMAT": "json"}
        ),
    ]
    container = hardened_container("capcom", ["capcom"], env, image)
    container["ports"] = [{"name": "http", "containerPort": CAPCOM_PORT}]
    container["readinessProbe"] = http_probe("/readyz", "http", period=10, failures=3)
    container["livenessProbe"] = http_probe("/healthz", "http", period=10, failures=3)
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata(name, "capcom"),
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels("capcom")},
            "template": pod_template("capcom", container, grace=30),
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(name, "capcom"),
        "spec": {
            "selector": labels("capcom"),
            "ports": [{"name": "http", "port": CAPCOM_PORT, "targetPort": "http"}],
        },
    }
    return [deployment, service]
