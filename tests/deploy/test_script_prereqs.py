"""The scripts that need tools say what to install, in one line, before anything else
(issue 44 item 5: ``scripts/build-image`` failed without runc and debootstrap and said
nothing). Each runs with a PATH that has bash and the coreutils it starts with, and no
podman: it exits 1 with one line naming the packages for ``apt-get install -y``."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _bare_path(where: Path) -> str:
    where.mkdir()
    for tool in ("bash", "dirname", "basename", "seq", "sleep"):
        found = shutil.which(tool)
        assert found, tool
        (where / tool).symlink_to(found)
    return str(where)


@pytest.mark.parametrize(
    ("script", "packages"),
    [
        ("build-image", "podman python3 git coreutils"),
        ("build-compose-images", "podman coreutils"),
    ],
)
def test_a_build_script_names_the_packages_it_lacks(
    script: str, packages: str, tmp_path: Path
) -> None:
    env = {"PATH": _bare_path(tmp_path / "bin"), "HOME": str(tmp_path)}
    result = subprocess.run(
        [str(ROOT / "scripts" / script)], env=env, capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 1, result
    assert result.stdout == ""
    line = result.stderr.rstrip("\n")
    assert "\n" not in line, line
    # runc and debootstrap are found in /usr/sbin when installed (a user's PATH may
    # lack it); without them they are named too.
    assert line.startswith(f"{script}: missing prerequisites; install them: apt-get install -y "), (
        line
    )
    named = line.rsplit("apt-get install -y ", 1)[1].split()
    assert [p for p in named if p not in ("runc", "debootstrap")] == packages.split(), line


def test_scripts_compose_without_a_compose_says_what_to_install(tmp_path: Path) -> None:
    env = {"PATH": _bare_path(tmp_path / "bin"), "HOME": str(tmp_path)}
    result = subprocess.run(
        [str(ROOT / "scripts/compose"), "up", "-d"],
        env=env, capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert result.returncode == 1, result
    assert result.stderr.count("\n") == 1, result.stderr
    assert "pip install podman-compose" in result.stderr
    assert "apt-get install -y podman runc" in result.stderr


def test_the_scripts_default_containers_conf_to_the_repositorys(tmp_path: Path) -> None:
    """Without CONTAINERS_CONF podman's crun fails every container here (`setrlimit
    RLIMIT_NOFILE`): the scripts set it to deploy/podman/containers.conf, keeping a
    value the caller set."""
    probe = f'. {ROOT}/scripts/lib-prereqs.sh; echo "$CONTAINERS_CONF"'
    env = {k: v for k, v in os.environ.items() if k != "CONTAINERS_CONF"}
    default = subprocess.run(["bash", "-c", probe], env=env, capture_output=True, text=True)
    assert default.stdout.strip() == str(ROOT / "deploy/podman/containers.conf")
    env["CONTAINERS_CONF"] = "/etc/mine.conf"
    kept = subprocess.run(["bash", "-c", probe], env=env, capture_output=True, text=True)
    assert kept.stdout.strip() == "/etc/mine.conf"
