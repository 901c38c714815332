"""Worker Deployments and their KEDA scaling (their NetworkPolicy: :mod:`.policies`).

One Deployment per surface and tier (``SURFACE_QUEUE_TYPE`` selects it; the image is
the same). KEDA's PostgreSQL scaler reads ``maestro_queue_depth(<type>)`` (migration
0011: ready rows + in-flight rows of that type) over the queue DB credential of a
TriggerAuthentication, and asks for one replica per :data:`DEPTH_PER_REPLICA` of it.
"""

from __future__ import annotations

from dataplane.deploy.manifests import (
    CAPCOM_PORT,
    KEDA_COOLDOWN_SECONDS,
    KEDA_POLLING_SECONDS,
    METRICS_PORT,
    NAME,
    WORKER_MAX_REPLICAS,
    WORKER_TERMINATION_SECONDS,
    Obj,
    WorkerSpec,
    from_secret,
    hardened_container,
    http_probe,
    labels,
    metadata,
    metrics_token_env,
    plain_env,
    pod_template,
    queue_db_env,
)
from dataplane.worker.config import CONCURRENCY, SHUTDOWN_GRACE_SECONDS

DEPTH_PER_REPLICA = CONCURRENCY  # ready + in-flight rows one worker takes on (its slots)
QUEUE_DB_AUTH = f"{NAME}-queue-db"  # the TriggerAuthentication's name


def worker_deployment(spec: WorkerSpec, image: str) -> Obj:
    env = [queue_db_env("worker"), metrics_token_env()]
    if spec.needs_client_db:
        env.append(from_secret("DATAPLANE_CLIENT_DB_URL", "dataplane-client-db", "url"))
    env += [
        from_secret("DATAPLANE_NOTIFY_SECRET", "dataplane-shared", "notify-secret", optional=True),
        from_secret("DATAPLANE_CAPCOM_TOKEN", "dataplane-shared", "capcom-token", optional=True),
        *plain_env(
            {
                "SURFACE_QUEUE_TYPE": spec.queue_type,
                "DATAPLANE_CAPCOM_URL": f"http://{NAME}-capcom:{CAPCOM_PORT}",
                "DATAPLANE_METRICS": "1",
                "DATAPLANE_METRICS_HOST": "0.0.0.0",
                "DATAPLANE_METRICS_PORT": str(METRICS_PORT),
                "DATAPLANE_SHUTDOWN_GRACE_SECONDS": str(int(SHUTDOWN_GRACE_SECONDS)),
                "DATAPLANE_LOG_FORMAT": "json",
            }
        ),
    ]
    container = hardened_container("worker", ["worker"], env, image)
    container["ports"] = [{"name": "metrics", "containerPort": METRICS_PORT}]
    container["readinessProbe"] = http_probe("/readyz", "metrics", period=5, failures=2)
    container["livenessProbe"] = http_probe("/healthz", "metrics", period=10, failures=3)
    tier = {"dataplane.dev/queue-type": spec.queue_type}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata(spec.name, "worker", **tier),
        "spec": {
            "replicas": 0 if spec.dev else 1,
            "selector": {"matchLabels": labels("worker", **tier)},
            "template": pod_template("worker", container, grace=WORKER_TERMINATION_SECONDS, **tier),
        },
    }


def scaled_object(spec: WorkerSpec) -> Obj:
    """KEDA scales the worker on its queue's depth; a dev tier may go to zero."""
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": metadata(spec.name, "worker", **{"dataplane.dev/queue-type": spec.queue_type}),
        "spec": {
            "scaleTargetRef": {"name": spec.name},
            "minReplicaCount": 0 if spec.dev else 1,
            "maxReplicaCount": WORKER_MAX_REPLICAS,
            "pollingInterval": KEDA_POLLING_SECONDS,
            "cooldownPeriod": KEDA_COOLDOWN_SECONDS,
            "triggers": [
                {
                    "type": "postgresql",
                    "metadata": {
                        "query": f"SELECT maestro_queue_depth('{spec.queue_type}')",
                        "targetQueryValue": str(DEPTH_PER_REPLICA),
                        "activationTargetQueryValue": "0",
                    },
                    "authenticationRef": {"name": QUEUE_DB_AUTH},
                }
            ],
        },
    }


def trigger_authentication() -> Obj:
    """The scaler's connection: its own login's DSN (a member of ``dataplane_scaler``,
    which may EXECUTE the depth function and read no table) from its Secret."""
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "TriggerAuthentication",
        "metadata": metadata(QUEUE_DB_AUTH, "worker"),
        "spec": {
            "secretTargetRef": [
                {"parameter": "connection", "name": "dataplane-queue-db-scaler", "key": "url"}
            ]
        },
    }
