"""compose.yaml under podman-compose, offline (``config``, no container runs): every
service, each container with its own secrets' env file and none in the compose file."""

from __future__ import annotations

import os
from pathlib import Path

import yaml
from psycopg.conninfo import conninfo_to_dict

from tests.fleet.test_compose import CONF, VERSION, _env_file, compose, secrets

SERVICES = {
    "postgres", "migrate", "demo-db", "bff1", "bff2", "proxy", "capcom", "prometheus",
    "worker-users", "worker-learnerviews", "worker-accounting", "worker-skills",
}  # fmt: skip


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
