"""The browser client package's own tests, ``npm test`` in clients/js, run by pytest.

node's test runner starts a real ``dataplane dev`` (embedded Postgres, BFF, a worker per
surface) and asks it over real HTTP: answers, abort that withdraws the job (a paused
queue keeps it pending), 429 retries within a budget, 401 refresh, progress, and a
stream cut by a proxy of the test's own that reconnects with ``Last-Event-ID``. The
package is built first (``npm run build``: its locked tsc) so the tests import today's
``src/``. Needs Node and ``npm ci`` in clients/js (``.ci/run`` does both).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "clients" / "js"


def _npm(*args: str, timeout: float, env: dict[str, str] | None = None) -> str:
    npm = shutil.which("npm")
    if npm is None or not (PACKAGE / "node_modules" / ".bin" / "tsc").exists():
        pytest.fail(
            f"npm or the package tools are missing: install nodejs and npm; `npm ci` in {PACKAGE}"
        )
    run = subprocess.run(
        [npm, *args],
        cwd=PACKAGE,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
    assert run.returncode == 0, (
        f"npm {' '.join(args)} failed:\n{run.stdout[-8000:]}\n{run.stderr[-4000:]}"
    )
    return run.stdout


def test_the_packages_node_tests_pass_against_dataplane_dev() -> None:
    _npm("run", "build", timeout=180)
    dataplane = Path(sys.executable).with_name("dataplane")
    env = {**os.environ, "DATAPLANE_BIN": str(dataplane)}
    out = _npm("test", timeout=600, env=env)
    # The runner's summary: every case ran and passed (none skipped or left as todo).
    summary = dict(
        line[2:].split(" ", 1)
        for line in out.splitlines()
        if line.startswith("# ") and " " in line[2:]
    )
    assert int(summary.get("tests", "0")) >= 8, out[-4000:]
    assert summary.get("pass") == summary.get("tests"), out[-4000:]
    assert summary.get("skipped") == "0" and summary.get("todo") == "0", out[-4000:]
