"""The browser client package, clients/js: what the BFF serves is its build.

Its own tests (``npm test``: node's test runner against a real ``dataplane dev`` they
start) run in tests/acceptance/test_js_client.py.

Needs Node (Debian's ``nodejs``, ``npm``) and the package's locked devDependencies
(``npm ci`` in clients/js; ``.ci/run`` does both). Without them the tests fail saying so.
"""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "clients" / "js"
STATIC = ROOT / "dataplane" / "bff" / "static"


def _tool(name: str) -> Path:
    path = PACKAGE / "node_modules" / ".bin" / name
    if shutil.which("node") is None or not path.exists():
        pytest.fail(f"{name} is missing: install nodejs and npm, then run `npm ci` in {PACKAGE}")
    return path


def _built(out: Path) -> Path:
    """tsc's build of the package (tsconfig.json: the client and the React binding)."""
    run = subprocess.run(
        [str(_tool("tsc")), "-p", "tsconfig.json", "--outDir", str(out)],
        cwd=PACKAGE,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    return out


def test_the_served_client_is_the_packages_build(tmp_path: Path) -> None:
    """/static/dataClient.js and its .d.ts are tsc's output for src/index.ts, byte for byte:
    the page and the package never drift (`npm run sync` in clients/js rewrites them)."""
    out = _built(tmp_path / "dist")
    for built, served in (("index.js", "dataClient.js"), ("index.d.ts", "dataClient.d.ts")):
        assert (out / built).read_text() == (STATIC / served).read_text(), (
            f"dataplane/bff/static/{served} is not the build of clients/js/src/index.ts:"
            " run `npm run sync` in clients/js"
        )


# The size budget README states (bytes of the minified module, gzip -9): what a page pays
# for the client and for the React binding. The build today: 2,974 and 892.
BUDGET = {"index.js": 3_500, "react.js": 1_200}


def test_the_client_stays_within_its_size_budget(tmp_path: Path) -> None:
    esbuild = _tool("esbuild")
    out = _built(tmp_path / "dist")
    sizes = {}
    for name, budget in BUDGET.items():
        minified = subprocess.run(
            [str(esbuild), str(out / name), "--minify", "--format=esm"],
            capture_output=True,
            timeout=60,
        )
        assert minified.returncode == 0, minified.stderr.decode()
        sizes[name] = len(gzip.compress(minified.stdout, compresslevel=9))
        assert sizes[name] <= budget, f"{name}: {sizes[name]} B min+gzip, over its {budget} B"
    print(f"min+gzip: {sizes}")


def test_the_packages_version_is_the_planes() -> None:
    """One release: the npm package carries pyproject.toml's version (and its lock too)."""
    plane = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    package = json.loads((PACKAGE / "package.json").read_text())
    lock = json.loads((PACKAGE / "package-lock.json").read_text())
    assert package["version"] == plane, "clients/js/package.json: set version to the plane's"
    assert lock["version"] == plane and lock["packages"][""]["version"] == plane
