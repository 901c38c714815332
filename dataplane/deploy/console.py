"""The operators' console (``dataplane console``): Deployment and ClusterIP Service.

Never an Ingress: operators reach it with ``kubectl port-forward svc/dataplane-console
8002`` or through their own (internal) ingress, which an overlay lets in by its
NetworkPolicy (:mod:`dataplane.deploy.policies`). Its queue-DB login is a member of
``dataplane_operator`` only (``dataplane-queue-db-console``); it verifies the BFF's
JWTs with the BFF's key (``dataplane-bff``: ``jwt-secret`` or ``jwt-public-key``, never
the stream secret); its CSRF key, shared by the replicas, is ``dataplane-console``
``csrf-secret`` (required: the example overlay generates it). It serves no
``/metrics``: no metrics token.
"""

from __future__ import annotations

from dataplane.deploy.manifests import (
    NAME,
    Obj,
    from_secret,
    hardened_container,
    http_probe,
    labels,
    metadata,
    plain_env,
    pod_template,
    queue_db_env,
)

CONSOLE_PORT = 8002
CONSOLE_REPLICAS = 1  # operators, not traffic: a second replica shares the CSRF key
CONSOLE_TERMINATION_SECONDS = 30  # the wallboard's streams end at once; pages are short


def console_objects(image: str) -> list[Obj]:
    name = f"{NAME}-console"
    env = [
        queue_db_env("console"),
        from_secret("DATAPLANE_JWT_SECRET", "dataplane-bff", "jwt-secret", optional=True),
        from_secret("DATAPLANE_JWT_PUBLIC_KEY", "dataplane-bff", "jwt-public-key", optional=True),
        from_secret("DATAPLANE_CONSOLE_SECRET", "dataplane-console", "csrf-secret"),
        *plain_env(
            {"DATAPLANE_CONSOLE_BIND": f"0.0.0.0:{CONSOLE_PORT}", "DATAPLANE_LOG_FORMAT": "json"}
        ),
    ]
    container = hardened_container("console", ["console"], env, image)
    container["ports"] = [{"name": "http", "containerPort": CONSOLE_PORT}]
    container["readinessProbe"] = http_probe("/readyz", "http", period=10, failures=3)
    container["livenessProbe"] = http_probe("/healthz", "http", period=10, failures=3)
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata(name, "console"),
        "spec": {
            "replicas": CONSOLE_REPLICAS,
            "selector": {"matchLabels": labels("console")},
            "template": pod_template("console", container, grace=CONSOLE_TERMINATION_SECONDS),
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(name, "console"),
        "spec": {
            "type": "ClusterIP",
            "selector": labels("console"),
            "ports": [{"name": "http", "port": CONSOLE_PORT, "targetPort": "http"}],
        },
    }
    return [deployment, service]
