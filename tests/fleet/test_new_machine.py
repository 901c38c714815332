"""A new user's whole path, from README's own text, on a machine that has none of the
suite's Debian packages: a fresh Debian bookworm (the debootstrap base the image is
built on) in a privileged podman container of the test's own, with git and curl.

README's ``machine`` and ``run`` shell blocks (tests/snippets.py) run there in document
order, as one bash script, in a fresh clone of this repository's HEAD (what is
committed: a change not committed is not tested here): the install line,
the tour against ``dataplane dev`` (a query, the stream, a surface of one's own and its
test), the fast tier through ``scripts/test`` (which installs the Debian packages, the
ha venv and node_modules first, and must stay green with the new surface installed),
then the image, compose up (podman inside the container, on storage of the test's
own), a query through the proxy and compose down. The output must hold each block's
``expect:`` strings.

The machine's own network settings are passed in, as a user's machine has them (the
CA bundle of this host's TLS proxy, pip's timeout); the host's apt and npm caches are
mounted copy-on-write (``:O``) to spare the download, never written.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from tests.snippets import ROOT, Snippet, outputs, script_of, snippets

BASE = "localhost/dataplane-base:bookworm"
CONF = ROOT / "deploy" / "podman" / "containers.conf"
WITHIN = 50 * 60  # the whole path, seconds: the fast tier, two image builds, compose
# The host's network settings a user's machine would have (no proxy CA, no download).
PASSED_ENV = (
    "PIP_DEFAULT_TIMEOUT",
    "SSL_CERT_FILE",
    "REQUESTS_CA_BUNDLE",
    "PIP_CERT",
    "CURL_CA_BUNDLE",
    "NODE_EXTRA_CA_CERTS",
    "GIT_SSL_CAINFO",
)
CA = Path("/etc/ssl/certs/ca-certificates.crt")

MACHINE = """\
step() { echo "== $(date +%T) $*"; }
step "the machine: Debian bookworm, minbase, with git and curl"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq && apt-get install -y -qq git curl >/dev/null
for tool in chromium pgbouncer prometheus etcd haproxy node npm podman runc debootstrap; do
  ! command -v "$tool" >/dev/null || { echo "$tool is already installed" >&2; exit 1; }
done
git clone -q /src "$HOME/surface-data-plane" && cd "$HOME/surface-data-plane"
"""


def readme_path() -> list[Snippet]:
    return [
        s
        for s in snippets(ROOT / "README.md")
        if s.marker in ("run", "machine") and s.language != "python"
    ]


def podman(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CONTAINERS_CONF": str(CONF)}
    return subprocess.run(
        ["podman", *args], env=env, capture_output=True, text=True, timeout=timeout
    )


def base_image() -> str:
    if shutil.which("podman") is None:
        pytest.fail("podman is missing: scripts/test installs it")
    if podman("image", "exists", BASE).returncode != 0:
        made = subprocess.run(
            ["scripts/build-image"],
            cwd=ROOT,
            env={**os.environ, "BUILD_BASE_ONLY": "1"},
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert made.returncode == 0, made.stdout + made.stderr
    return BASE


@pytest.mark.timeout(WITHIN + 60)
def test_a_new_user_goes_from_a_fresh_clone_to_a_query_through_the_proxy(
    tmp_path: Path,
) -> None:
    blocks = readme_path()
    kinds = [b.marker for b in blocks]
    assert kinds.count("machine") >= 3 and kinds.count("run") >= 2, kinds
    script = script_of(blocks).replace("set -euo pipefail\n", "set -euo pipefail\n" + MACHINE, 1)
    (tmp_path / "new-user.sh").write_text(script)
    storage = tmp_path / "containers"  # the inner podman's: a plain directory, not overlay
    storage.mkdir()
    name = f"dataplane-new-machine-{uuid.uuid4().hex[:8]}"
    mounts = [
        f"{ROOT}:/src:ro",
        f"{tmp_path / 'new-user.sh'}:/new-user.sh:ro",
        f"{storage}:/var/lib/containers",
    ]
    if CA.exists():
        mounts.append(f"{CA}:{CA}:ro")
    for cache, inside in (("/var/cache/apt/archives", "/var/cache/apt/archives"),):
        if Path(cache).is_dir():
            mounts.append(f"{cache}:{inside}:O")
    npm_cache = Path.home() / ".npm"
    if npm_cache.is_dir():
        mounts.append(f"{npm_cache}:/root/.npm:O")
    env = [f"{k}={os.environ[k]}" for k in PASSED_ENV if k in os.environ]
    # The machine's own network (slirp4netns): on podman's default bridge it would hold
    # 10.88.0.0/16, the subnet its own podman gives the containers it runs, and their
    # traffic (DNS first) would never leave it.
    args = ["run", "--rm", "--name", name, "--privileged", "--shm-size", "1g"]
    args += ["--network", "slirp4netns"]
    for mount in mounts:
        args += ["-v", mount]
    for pair in [*env, "PORT=8000", "DEV_START_SECONDS=240", "HOME=/root"]:
        args += ["-e", pair]
    log = tmp_path / "new-user.log"  # what it printed, stdout and stderr, as it goes
    command = ["podman", *args, base_image(), "bash", "/new-user.sh"]
    try:
        with log.open("w") as sink:
            ran = subprocess.run(
                command,
                env={**os.environ, "CONTAINERS_CONF": str(CONF)},
                stdout=sink,
                stderr=subprocess.STDOUT,
                timeout=WITHIN,
            )
    except subprocess.TimeoutExpired:
        podman("rm", "-f", "-t", "5", name)
        pytest.fail(f"the new user's path ran past {WITHIN} s:\n{log.read_text()[-8000:]}")
    finally:
        # The inner podman's layers (root's, uids as in the images): gone with the test.
        shutil.rmtree(storage, ignore_errors=True)
    out = log.read_text()
    assert ran.returncode == 0, f"the new user's path failed:\n{script}\n--- output\n{out[-12000:]}"
    printed = outputs(out)
    for block in blocks:
        for expected in block.expect:
            assert expected in printed.get(block.where, ""), (
                f"{block.where}: no {expected!r} in\n{printed.get(block.where, out)[-6000:]}"
            )
