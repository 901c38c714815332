"""The browser client package's own tests, ``npm test`` in clients/js, run by pytest.

node's test runner starts a real ``dataplane dev`` (embedded Postgres, BFF, a worker per
surface) and asks it over real HTTP: answers, abort that withdraws the job (a paused
queue keeps it pending), 429 retries within a budget, 401 refresh, progress, and a
stream cut by a proxy of the test's own that reconnects with ``Last-Event-ID``. The
package is built first (``npm run build``: its locked tsc) so the tests import today's
``src/``. And what a team does: ``npm pack``, install the tarball into an empty project
offline, generate its types from a running BFF, compile a typed query, run it. Needs
Node and ``npm ci`` in clients/js (``.ci/run`` does both).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from dataplane.dev.embedded import free_port
from tests.helpers import JWT_SECRET, BffProcess, WorkerProcess, token

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


APP_TS = """\
import { createPlaneClient } from "@surface-dataplane/client";
import type { Operations } from "./plane.js";

declare const process: { env: Record<string, string | undefined> };

const plane = createPlaneClient<Operations>({
  apiRoot: `${process.env.BASE}/api`,
  getToken: () => process.env.TOKEN ?? "",
});
const answer = await plane.query("probe", "echo", { value: 42 });
const client: string = answer.client; // typed: probe.echo's result schema
console.log(JSON.stringify({ echo: answer.echo, client }));
"""


def _ready(base: str, proc: subprocess.Popen[bytes], within: float = 30.0) -> None:
    deadline = time.monotonic() + within
    with httpx.Client(base_url=base, timeout=2) as client:
        while time.monotonic() < deadline:
            assert proc.poll() is None, f"{base} exited early"
            try:
                if client.get("/readyz").status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
    raise AssertionError(f"{base} not ready within {within}s")


def _project(tmp: Path) -> Path:
    """An empty project with the package installed from its `npm pack` tarball, offline."""
    pack = _npm("pack", "--pack-destination", str(tmp), "--silent", timeout=300)
    tarball = tmp / pack.strip().splitlines()[-1]
    assert tarball.is_file(), pack
    project = tmp / "app"
    project.mkdir()
    (project / "package.json").write_text(
        json.dumps({"name": "app", "private": True, "type": "module"})
    )
    npm = shutil.which("npm") or "npm"
    run = subprocess.run(
        [npm, "install", "--offline", "--no-audit", "--no-fund", str(tarball)],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    return project


def test_the_tarball_installs_offline_and_a_typed_query_compiles_and_answers(
    queue_dsn: str, tmp_path: Path
) -> None:
    project = _project(tmp_path)
    env = {
        "MAESTRO_QUEUES_URL": queue_dsn,
        "DATAPLANE_JWT_SECRET": JWT_SECRET,
        "DATAPLANE_PROBE": "1",
        "DATAPLANE_SURFACES": "",
        "SURFACE_QUEUE_TYPE": "surface-probe",
        "DATAPLANE_QUEUE_SUFFIX": "",
        "PYTHONUNBUFFERED": "1",
    }
    worker = WorkerProcess(env, str(tmp_path / "worker.log"))
    bff = BffProcess(env, str(tmp_path / "bff.log"), port=free_port(), args=("-k", "trio"))
    try:
        worker.wait_ready_blocking()
        _ready(bff.base, bff.proc)
        # The installed bin, against the running BFF's /openapi.json.
        bin_ = project / "node_modules" / ".bin" / "surface-dataplane"
        gen = subprocess.run(
            [str(bin_), "generate", "--openapi", f"{bff.base}/openapi.json", "--out", "plane.ts"],
            cwd=project,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert gen.returncode == 0, gen.stdout + gen.stderr
        (project / "app.ts").write_text(APP_TS)
        config = {
            "compilerOptions": {
                "target": "es2022",
                "module": "esnext",
                "moduleResolution": "bundler",
                "lib": ["es2022", "dom"],
                "types": [],
                "strict": True,
                "outDir": "out",
            },
            "files": ["app.ts"],
        }
        (project / "tsconfig.json").write_text(json.dumps(config))
        tsc = PACKAGE / "node_modules" / ".bin" / "tsc"
        built = subprocess.run(
            [str(tsc), "-p", "tsconfig.json"],
            cwd=project,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert built.returncode == 0, built.stdout + built.stderr
        ran = subprocess.run(
            ["node", "out/app.js"],
            cwd=project,
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "BASE": bff.base, "TOKEN": token("acme")},
        )
        assert ran.returncode == 0, ran.stdout + ran.stderr
        assert json.loads(ran.stdout) == {"echo": 42, "client": "acme"}
    finally:
        bff.stop()
        worker.stop()
