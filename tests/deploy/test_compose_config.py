"""compose.yaml under podman-compose, offline (``config``, no container runs): every
service, each container with its own secrets' env file and none in the compose file."""

from __future__ import annotations

import os
from pathlib import Path

import yaml
from psycopg.conninfo import conninfo_to_dict

from tests.fleet.test_compose import CONF, VERSION, _env_file, compose, secrets

SERVICES = {
    "postgres", "migrate", "demo-db", "bff1", "bff2", "proxy", "capcom", "console", "prometheus",
    "alertmanager", "worker-users", "worker-learnerviews", "worker-accounting", "worker-skills",
}  # fmt: skip
KINDS = ("admin", "demo", "bff", "worker", "capcom", "console")  # an env file each


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
        if kind in KINDS:
            assert [str(Path(f)) for f in files] == [str(tmp_path / f"{kind}.env")], (name, files)
    env_of = {k: _env_file(tmp_path / f"{k}.env") for k in KINDS}
    # Each its own database login: only demo-db holds the superuser, only migrate the
    # schema's owner; the probe surface is off (it stores 16 MiB blobs for anyone).
    users = {k: conninfo_to_dict(e["MAESTRO_QUEUES_URL"])["user"] for k, e in env_of.items()}
    assert users == {
        "admin": "dataplane", "demo": "postgres", "bff": "bff_login",
        "worker": "worker_login", "capcom": "capcom_login", "console": "console_login",
    }  # fmt: skip
    assert not [k for k, e in env_of.items() if "DATAPLANE_PROBE" in e]
    assert "DATAPLANE_PROBE" not in rendered and "surface-probe" not in rendered
    # A worker runs surface code: it cannot mint tokens or stream URLs; capcom reads no
    # client DB; only the BFF holds the JWT secret.
    assert not {"DATAPLANE_JWT_SECRET", "DATAPLANE_STREAM_SECRET"} & set(env_of["worker"])
    assert not {"DATAPLANE_JWT_SECRET", "DATAPLANE_CLIENT_DB_URL"} & set(env_of["capcom"])
    assert [k for k, e in env_of.items() if "DATAPLANE_JWT_SECRET" in e] == ["bff", "console"]
    # The console: its login (in dataplane_operator), the key that verifies a token, its
    # CSRF key; nothing that mints a stream URL, seals a note or reads a client DB.
    assert set(env_of["console"]) == {
        "MAESTRO_QUEUES_URL", "DATAPLANE_JWT_SECRET", "DATAPLANE_CONSOLE_SECRET",
        "DATAPLANE_LOG_FORMAT",
    }  # fmt: skip
    assert env_of["console"]["DATAPLANE_JWT_SECRET"] == env_of["bff"]["DATAPLANE_JWT_SECRET"]
    assert len(env_of["console"]["DATAPLANE_CONSOLE_SECRET"]) >= 32
    console = services["console"]
    assert console["command"] == ["console"] and not console.get("secrets")
    assert console["environment"]["DATAPLANE_CONSOLE_BIND"] == "0.0.0.0:8002"
    assert console["ports"] == ["127.0.0.1:8002:8002"]  # the host's loopback only
    assert "console_db_password" in services["postgres"]["secrets"]
    files = ("pg_password", "metrics_token", "console_db_password")
    values = [(tmp_path / name).read_text().strip() for name in files]
    values += [v for e in env_of.values() for v in e.values()]
    for value in (v for v in values if len(v) >= 32):
        assert value not in rendered
    # Images can be replaced from the environment (a registry's instead of local builds).
    env["POSTGRES_IMAGE"] = "docker.io/library/postgres:16"
    assert "image: docker.io/library/postgres:16" in compose(env, "config", timeout=60).stdout
