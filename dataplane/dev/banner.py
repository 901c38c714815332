"""What ``dataplane dev`` prints once its stack is up: where everything is, two tokens,
each process's metrics URL, and the ``export`` lines a second shell's CLI needs."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

from dataplane.auth.verifier import mint_token
from dataplane.dev.children import Child
from dataplane.dev.ports import DevPorts

RELOAD_ON = "on: a saved file of a surface package restarts what serves it"


@dataclass(frozen=True, slots=True)
class Banner:
    ready: bool  # the BFF answered /readyz in time
    ports: DevPorts
    secret: str  # the development JWT secret
    dev_dir: Path
    children: list[Child]
    logins: dict[str, str]  # DSN of each process's login
    queue_dsn: str
    otlp: str | None
    reload: bool
    capcom: bool = True  # capcom is installed (it serves metrics)


def banner(b: Banner) -> str:
    """The lines, with a demo token (staff of client acme, 30 days) and an operator's
    (1 day) minted with the development secret."""
    port, console_port = b.ports.bff, b.ports.console
    metrics = metrics_urls(b.children, port, b.ports.capcom if b.capcom else None)
    width = max(len(name) for name in metrics)
    token = mint_token(b.secret, client="acme", sub="1", staff=True, ttl=30 * 24 * 3600)
    operator = mint_token(
        b.secret, client="acme", sub="dev-operator", roles=["dataplane:operator"], ttl=86400
    )
    url = f"http://127.0.0.1:{port}"
    log_dir = b.dev_dir / "logs"
    return "\n".join(
        [
            "",
            f"  Surface Data Plane is {'up' if b.ready else 'starting (slowly)'}: {url}",
            f"  Demo page:      {url}/?token={token}",
            f"  OpenAPI:        {url}/openapi.json",
            f"  Dev token:      {token}",
            "  (staff of client acme, all branches, valid 30 days; mint others with",
            f"   DATAPLANE_JWT_SECRET=$(cat {b.dev_dir}/jwt-secret) dataplane token ...)",
            f"  Try:  curl -s -X POST {url}/api/probe/q -H 'Authorization: Bearer <token>'",
            "           -H 'Content-Type: application/json'"
            ' -d \'{"operation":"echo","params":{}}\'',
            f"  Console:        http://127.0.0.1:{console_port}/login",
            f"  Operator token: {operator}",
            "  (dataplane:operator, valid 1 day: paste it at the console's login)",
            f"  Running:        {', '.join(c.name for c in b.children)}",
            "  Metrics:        (Prometheus text, one endpoint per process)",
            *(f"    {name:<{width}}  {u}" for name, u in metrics.items()),
            f"  OTLP:           {b.otlp or 'off (dataplane dev --otlp URL)'}",
            f"  Queue DB:       {b.queue_dsn}",
            "  The CLI from another shell (jobs, queue, audit, invalidate), while this runs:",
            *(f"    {line}" for line in exports(b.logins, b.children)),
            f"  Logs:           {log_dir}/",
            f"  Reload:         {RELOAD_ON if b.reload else 'off (dataplane dev --reload)'}",
            "  Ctrl-C stops everything.",
            "",
        ]
    )


def exports(logins: dict[str, str], children: list[Child]) -> list[str]:
    """``export`` lines for a second shell's CLI: ``MAESTRO_QUEUES_URL`` as the operator
    login (a member of ``dataplane_operator``: ``dataplane jobs``, ``queue``, ``audit``,
    and ``dataplane invalidate``, which reads the live workers first), and
    ``DATAPLANE_NOTIFY_SECRET``, the workers' (they believe only an invalidation sealed
    with it). Valid while this runs:
    each run gives the logins new passwords and the plane a new secret."""
    secret = next(
        (c.env["DATAPLANE_NOTIFY_SECRET"] for c in children if "DATAPLANE_NOTIFY_SECRET" in c.env),
        None,
    )
    found = {"MAESTRO_QUEUES_URL": logins["operator"], "DATAPLANE_NOTIFY_SECRET": secret}
    return [f"export {name}={shlex.quote(value)}" for name, value in found.items() if value]


def metrics_urls(children: list[Child], port: int, capcom_port: int | None) -> dict[str, str]:
    """Where each child serves its Prometheus metrics."""
    urls = {}
    for child in children:
        if child.name == "bff":
            urls[child.name] = f"http://127.0.0.1:{port}/metrics"
        elif child.name == "capcom" and capcom_port is not None:
            urls[child.name] = f"http://127.0.0.1:{capcom_port}/metrics"
        elif "DATAPLANE_METRICS_PORT" in child.env:
            urls[child.name] = f"http://127.0.0.1:{child.env['DATAPLANE_METRICS_PORT']}/metrics"
    return urls
