"""A NetworkPolicy per component: who may reach it, and what it may reach.

* BFF: ingress on its port from the ingress controller's namespace (and Prometheus's,
  for ``/metrics`` with its token) only;
* worker: ingress on its metrics port from the monitoring namespace only;
* capcom: ingress on its port from the workers, and from the monitoring namespace;
* console: no ingress rule at all in the base (operators reach it by ``kubectl
  port-forward``, which enters the pod by its loopback, not the pod network); an
  overlay adds a rule from its operators' namespace (:data:`CONSOLE_INGRESS_PATH`, the
  example overlay does), never "from anywhere";
* every component: egress to DNS, and to Postgres only at the databases the
  :data:`DATABASE_SELECTOR` labels (pods in-cluster); an overlay replaces that rule
  with ``ipBlock``\\ s for databases outside the cluster (the example overlay does), never
  "any destination on 5432". Workers also reach capcom.

Namespaces are matched by ``kubernetes.io/metadata.name`` (set by Kubernetes on every
namespace); the defaults are ``ingress-nginx`` and ``monitoring``: patch them in an
overlay when yours differ.
"""

from __future__ import annotations

from dataplane.deploy.manifests import (
    BFF_PORT,
    CAPCOM_PORT,
    METRICS_PORT,
    NAME,
    POSTGRES_PORT,
    Obj,
    labels,
    metadata,
)

INGRESS_NAMESPACE = "ingress-nginx"
MONITORING_NAMESPACE = "monitoring"
# Pods of the databases, in any namespace: label yours so, or replace the rule.
DATABASE_SELECTOR = {"dataplane.io/database": "true"}
# The index of the Postgres rule in every policy's egress (overlays patch it by path).
POSTGRES_RULE = 1
# Where an overlay appends who may reach the console (JSON patch ``op: add``): e.g.
# ``{"from": [<your operators' namespaceSelector>], "ports": [8002/TCP]}``.
CONSOLE_INGRESS_PATH = "/spec/ingress/-"


def _namespace(name: str) -> Obj:
    return {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": name}}}


def _tcp(port: int) -> list[Obj]:
    return [{"protocol": "TCP", "port": port}]


def _egress(*more: Obj) -> list[Obj]:
    dns = {"ports": [{"protocol": proto, "port": 53} for proto in ("UDP", "TCP")]}
    databases = {
        "to": [{"namespaceSelector": {}, "podSelector": {"matchLabels": DATABASE_SELECTOR}}],
        "ports": _tcp(POSTGRES_PORT),
    }
    return [dns, databases, *more]


def _policy(component: str, ingress: list[Obj], egress: list[Obj]) -> Obj:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": metadata(f"{NAME}-{component}", component),
        "spec": {
            "podSelector": {"matchLabels": labels(component)},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": ingress,
            "egress": egress,
        },
    }


def network_policies() -> list[Obj]:
    """The BFF's, the workers', capcom's and the console's policies."""
    monitoring = _namespace(MONITORING_NAMESPACE)
    workers = {"podSelector": {"matchLabels": labels("worker")}}
    capcom = {
        "to": [{"podSelector": {"matchLabels": labels("capcom")}}],
        "ports": _tcp(CAPCOM_PORT),
    }
    return [
        _policy(
            "bff",
            [{"from": [_namespace(INGRESS_NAMESPACE), monitoring], "ports": _tcp(BFF_PORT)}],
            _egress(),
        ),
        _policy("worker", [{"from": [monitoring], "ports": _tcp(METRICS_PORT)}], _egress(capcom)),
        _policy(
            "capcom",
            [{"from": [workers, monitoring], "ports": _tcp(CAPCOM_PORT)}],
            _egress(),
        ),
        _policy("console", [], _egress()),  # no ingress but port-forward: an overlay adds it
    ]
