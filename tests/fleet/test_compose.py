"""compose.yaml under real podman-compose: the config is accepted, and (slow) the whole
one-machine fleet comes up and answers a real POST -> SSE ``done`` through the proxy.

The images come from scripts/build-image (the plane's; ``IMAGE`` names another tag) and
scripts/build-compose-images (Postgres, HAProxy, Prometheus from Debian's packages),
reused while current. Each run is its own compose project on free loopback ports, with
its own secrets (deploy/compose/init-secrets into a temp dir), and is taken down with
its volumes at the end, whatever happened.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import tomllib
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml
from psycopg.conninfo import conninfo_to_dict

ROOT = Path(__file__).resolve().parents[2]
CONF = ROOT / "deploy" / "podman" / "containers.conf"
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
SERVICES = {
    "postgres", "migrate", "demo-db", "bff1", "bff2", "proxy", "capcom", "prometheus",
    "worker-users", "worker-learnerviews", "worker-accounting", "worker-skills",
}  # fmt: skip
UP_WITHIN = 180.0  # seconds from `up -d` to the proxy's /readyz 200 (images built)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def compose(
    env: dict[str, str], *args: str, timeout: float = 300, check: bool = True
) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "podman_compose", "-f", str(ROOT / "compose.yaml"), *args]
    return subprocess.run(
        command, env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=check
    )


def _env_file(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if line)


def secrets(where: Path) -> Path:
    subprocess.run([str(ROOT / "deploy/compose/init-secrets"), str(where)], check=True)
    return where


def test_compose_config_is_accepted_with_every_service_and_no_credential(tmp_path: Path) -> None:
    env = {**os.environ, "CONTAINERS_CONF": str(CONF), "DATAPLANE_SECRETS": str(secrets(tmp_path))}
    rendered = compose(env, "config", timeout=60).stdout
    assert f"image: localhost/dataplane-lms:{VERSION}" in rendered
    for service in SERVICES:
        assert f"\n  {service}:\n" in rendered, service
    # Secrets are files and env files in DATAPLANE_SECRETS, never in the compose file;
    # each kind of container reads only its own env file.
    services = yaml.safe_load(rendered)["services"]
    env_files = {name: services[name].get("env_file") for name in SERVICES}
    for name, files in env_files.items():
        files = files if isinstance(files, list) else [files]
        kind = "worker" if name.startswith("worker-") else name.rstrip("12")
        kind = {"migrate": "admin", "demo-db": "demo"}.get(kind, kind)
        if kind in ("admin", "demo", "bff", "worker", "capcom"):
            assert [str(Path(f)) for f in files] == [str(tmp_path / f"{kind}.env")], (name, files)
    kinds = ("admin", "demo", "bff", "worker", "capcom")
    env_of = {k: _env_file(tmp_path / f"{k}.env") for k in kinds}
    # Each its own database login: only demo-db holds the superuser, only migrate the
    # schema's owner; the probe surface is off (it stores 16 MiB blobs for anyone).
    users = {k: conninfo_to_dict(e["MAESTRO_QUEUES_URL"])["user"] for k, e in env_of.items()}
    assert users == {
        "admin": "dataplane", "demo": "postgres", "bff": "bff_login",
        "worker": "worker_login", "capcom": "capcom_login",
    }  # fmt: skip
    assert not [k for k, e in env_of.items() if "DATAPLANE_PROBE" in e]
    assert "DATAPLANE_PROBE" not in rendered and "surface-probe" not in rendered
    # A worker runs surface code: it cannot mint tokens or stream URLs; capcom reads no
    # client DB; only the BFF holds the JWT secret.
    assert not {"DATAPLANE_JWT_SECRET", "DATAPLANE_STREAM_SECRET"} & set(env_of["worker"])
    assert not {"DATAPLANE_JWT_SECRET", "DATAPLANE_CLIENT_DB_URL"} & set(env_of["capcom"])
    assert [k for k, e in env_of.items() if "DATAPLANE_JWT_SECRET" in e] == ["bff"]
    values = [(tmp_path / name).read_text().strip() for name in ("pg_password", "metrics_token")]
    values += [v for e in env_of.values() for v in e.values()]
    for value in (v for v in values if len(v) >= 32):
        assert value not in rendered
    # Images can be replaced from the environment (a registry's instead of local builds).
    env["POSTGRES_IMAGE"] = "docker.io/library/postgres:16"
    assert "image: docker.io/library/postgres:16" in compose(env, "config", timeout=60).stdout


@pytest.fixture
def fleet_env(tmp_path: Path) -> Iterator[dict[str, str]]:
    env = {**os.environ, "CONTAINERS_CONF": str(CONF)}
    subprocess.run([str(ROOT / "scripts/build-image")], env=env, check=True, timeout=900)
    subprocess.run([str(ROOT / "scripts/build-compose-images")], env=env, check=True, timeout=900)
    image = os.environ.get("IMAGE", "localhost/dataplane")
    env.update(
        DATAPLANE_SECRETS=str(secrets(tmp_path / "secrets")),
        DATAPLANE_IMAGE=f"{image}-lms:{VERSION}",
        DATAPLANE_LISTEN=f"127.0.0.1:{free_port()}",
        PROMETHEUS_LISTEN=f"127.0.0.1:{free_port()}",
        COMPOSE_PROJECT_NAME=f"dptest{uuid.uuid4().hex[:8]}",
    )
    yield env
    project = env["COMPOSE_PROJECT_NAME"]
    down = compose(env, "-p", project, "down", "-v", "-t", "10", check=False)
    left = subprocess.run(
        ["podman", "ps", "-aq", "--filter", f"label=io.podman.compose.project={project}"],
        env=env, capture_output=True, text=True, check=False,
    ).stdout.split()  # fmt: skip
    if left:  # what `down` could not remove: removed here, and the test says so
        subprocess.run(["podman", "rm", "-f", "--depend", "-t", "0", *left], env=env, check=False)
        pytest.fail(f"compose down left {len(left)} containers: {down.stderr[-2000:]}")


def logs(env: dict[str, str], service: str) -> str:
    project = env["COMPOSE_PROJECT_NAME"]
    result = compose(env, "-p", project, "logs", service, check=False, timeout=60)
    return (result.stdout + result.stderr)[-3000:]


@pytest.mark.slow
def test_compose_up_answers_a_post_with_sse_done_through_the_proxy(
    fleet_env: dict[str, str],
) -> None:
    env, project = fleet_env, fleet_env["COMPOSE_PROJECT_NAME"]
    started = time.monotonic()
    compose(env, "-p", project, "up", "-d", timeout=300)
    base = "http://" + env["DATAPLANE_LISTEN"]
    with httpx.Client(base_url=base, timeout=10) as http:
        while True:
            try:
                if http.get("/readyz").status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() - started < UP_WITHIN, logs(env, "bff1")
            time.sleep(0.5)
        ready = time.monotonic() - started
        # /readyz checks that the queue DB answers, not that it is migrated: a POST before
        # `migrate` has finished is a 500 (undefined table). Wait for the one-shot.
        waited = subprocess.run(
            ["podman", "wait", f"{project}_migrate_1"],
            env=env, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert waited.stdout.strip() == "0", (waited, logs(env, "migrate"))
        secret = _env_file(Path(env["DATAPLANE_SECRETS"], "bff.env"))["DATAPLANE_JWT_SECRET"]
        from dataplane.bff.auth.verifier import mint_token

        jwt = mint_token(secret, client="acme", sub="1", staff=True, branches=["*"], ttl=600)
        auth = {"Authorization": f"Bearer {jwt}"}
        body = {"operation": "list", "params": {"limit": 3}}
        deadline = time.monotonic() + 90
        while True:  # the users worker may still be booting (restarted until demo-db ran)
            posted = http.post("/api/users/q", json=body, headers=auth)
            assert posted.status_code == 202, (posted.text, logs(env, "bff1"), logs(env, "bff2"))
            with http.stream("GET", posted.json()["streamUrl"], timeout=70) as stream:
                assert stream.headers["content-type"].startswith("text/event-stream")
                events = [line for line in stream.iter_lines() if line.startswith("data:")]
            final = json.loads(events[-1][len("data:") :])
            if final.get("status") == "done":
                break
            assert time.monotonic() < deadline, (final, logs(env, "worker-users"))
        assert len(final["result"]["rows"]) == 3, final
        # Every process of the plane is connected as its own login, none as the owner's
        # or the superuser's (the runtime refuses those: dataplane.queue.roles).
        pg_password = Path(env["DATAPLANE_SECRETS"], "pg_password").read_text().strip()
        sessions = subprocess.run(
            ["podman", "exec", "-e", f"PGPASSWORD={pg_password}", f"{project}_postgres_1",
             "psql", "-h", "/tmp", "-U", "postgres", "-d", "queues", "-Atc",
             "SELECT DISTINCT usename FROM pg_stat_activity WHERE backend_type = 'client backend'"
             " AND usename <> 'postgres'"],
            env=env, capture_output=True, text=True, timeout=60, check=True,
        ).stdout.split()  # fmt: skip
        assert {"bff_login", "worker_login", "capcom_login"} <= set(sessions), sessions
        assert "dataplane" not in sessions, sessions  # migrate has exited; nobody else
        assert http.get("/metrics").status_code == 404  # the proxy does not serve /metrics
        for encoded in ("/%6detrics", "/%2fmetrics"):  # nor past its rule, encoded
            assert http.get(encoded).status_code == 400, encoded
    print(f"compose up -d to /readyz through the proxy: {ready:.1f} s")
