"""The OCI image under real podman: read-only root, non-root, tini, SIGTERM -> exit 0.

Builds the images with scripts/build-image once per session (reused while the tag
exists and its source-hash label matches the tree). The rendered fleet under
``podman kube play`` is tests/fleet/test_kube_play.py.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CONF = ROOT / "deploy" / "podman" / "containers.conf"
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
IMAGE = f"localhost/dataplane:{VERSION}"
LMS_IMAGE = f"localhost/dataplane-lms:{VERSION}"


def podman(*args: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CONTAINERS_CONF": str(CONF)}
    return subprocess.run(
        ["podman", *args], env=env, check=check, timeout=timeout, capture_output=True, text=True
    )


@pytest.fixture(scope="session")
def images() -> tuple[str, str]:
    env = {**os.environ, "CONTAINERS_CONF": str(CONF)}
    subprocess.run([str(ROOT / "scripts" / "build-image")], env=env, check=True, timeout=600)
    return IMAGE, LMS_IMAGE


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_image_runs_read_only_as_non_root(images: tuple[str, str]) -> None:
    ident = podman("run", "--rm", "--read-only", "--entrypoint", "id", images[0]).stdout
    assert ident.startswith("uid=10001(dataplane) gid=10001(dataplane)")
    surfaces = podman("run", "--rm", "--read-only", images[1], "surfaces", "--json").stdout
    assert "dataplane-lms" in surfaces and '"operation": "invoice"' in surfaces
    labels = podman("image", "inspect", "--format", "{{json .Labels}}", images[0]).stdout
    assert f'"org.opencontainers.image.version":"{VERSION}"' in labels


def test_sigterm_exits_zero_within_the_grace(images: tuple[str, str]) -> None:
    port = free_port()
    name = f"dp-sigterm-{port}"
    podman(
        "run", "-d", "--name", name, "--read-only", "--network", "host",
        "-e", f"DATAPLANE_CAPCOM_BIND=127.0.0.1:{port}", images[0], "capcom",
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, podman("logs", name, check=False).stderr
                time.sleep(0.1)
        started = time.monotonic()
        podman("kill", "-s", "TERM", name)
        code = podman("wait", name, timeout=15).stdout.strip()
        assert code == "0"
        assert time.monotonic() - started < 10
    finally:
        podman("rm", "-f", name, check=False)
