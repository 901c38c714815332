"""The three locks scripts/upgrade-deps writes agree, and the image's holds no test tool.

``requirements.lock`` (everything: CI, the dev venv), ``requirements-runtime.lock``
(deploy/Containerfile: the plane's runtime dependencies, pip, hatchling) and
``examples/lms/requirements.lock`` (the example surface image, installed on top). A
package in two of them has one version and one set of hashes, so the image runs what CI
tested.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FULL = ROOT / "requirements.lock"
RUNTIME = ROOT / "requirements-runtime.lock"
LMS = ROOT / "examples" / "lms" / "requirements.lock"
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)")
HASH = re.compile(r"--hash=(sha256:[0-9a-f]{64})")
# What the runtime lock holds besides the plane's dependency closure, on purpose.
IMAGE_EXTRAS = {"pip", "hatchling"}
# In the test extra, and also what a runtime dependency needs: Hypercorn's HTTP/2, the
# OTLP exporters' protobuf messages.
ALSO_RUNTIME = {"h2", "opentelemetry-proto"}


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(lock: Path) -> dict[str, tuple[str, frozenset[str]]]:
    """name -> (version, hashes) of every pin in ``lock``."""
    found: dict[str, tuple[str, frozenset[str]]] = {}
    name = version = ""
    hashes: set[str] = set()
    for line in [*lock.read_text().splitlines(), ""]:
        match = PIN.match(line)
        if match or not line.startswith(" "):
            if name:
                found[name] = (version, frozenset(hashes))
            name = version = ""
            hashes = set()
        if match:
            name, version = canonical(match[1]), match[2]
        hashes.update(HASH.findall(line))
    return found


def requirement_name(spec: str) -> str:
    match = re.match(r"[A-Za-z0-9._-]+", spec)
    assert match, spec
    return canonical(match[0])


@pytest.mark.parametrize("other", [RUNTIME, LMS], ids=["runtime", "lms"])
def test_every_shared_pin_agrees_with_requirements_lock(other: Path) -> None:
    full, theirs = pins(FULL), pins(other)
    assert theirs, f"{other.name}: no pins read"
    assert all(hashes for _, hashes in theirs.values()), "a pin without hashes"
    missing = sorted(set(theirs) - set(full))
    assert not missing, f"{other.relative_to(ROOT)} pins what requirements.lock lacks: {missing}"
    differ = {name: (full[name][0], pin[0]) for name, pin in theirs.items() if full[name] != pin}
    assert not differ, f"run scripts/upgrade-deps --keep --lock-only; (full, other): {differ}"


def test_the_runtime_lock_has_the_plane_and_no_test_tool() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    runtime = {requirement_name(spec) for spec in project["dependencies"]}
    test_only = {requirement_name(spec) for spec in project["optional-dependencies"]["test"]}
    test_only -= runtime | IMAGE_EXTRAS | ALSO_RUNTIME
    names = set(pins(RUNTIME))
    assert runtime <= names, sorted(runtime - names)
    assert IMAGE_EXTRAS <= names
    assert not names & test_only, sorted(names & test_only)
    # The example's lock adds its own (fpdf2), not the test tools either.
    lms = set(pins(LMS))
    assert "fpdf2" in lms and not lms & test_only, sorted(lms & test_only)
