"""The demo LMS is one installed surface package among possible others: found through
its entry point, and gone — from /openapi.json, and from what a worker may serve —
once uninstalled. (This test uninstalls ``dataplane-lms`` from the test venv and
installs it again from ``examples/lms`` before it ends.)"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import httpx

from dataplane.dev.embedded import free_port
from tests.helpers import JWT_SECRET, BffProcess

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "lms"


async def _run(*argv: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    import os

    import trio

    clean = {k: v for k, v in os.environ.items() if not k.startswith(("DATAPLANE_", "MAESTRO_"))}
    done = await trio.run_process(
        list(argv),
        env={**clean, **(env or {})},
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    return done.returncode, done.stdout.decode(), done.stderr.decode()


async def _registered() -> dict[str, str]:
    code, out, err = await _run(sys.executable, "-m", "dataplane", "surfaces", "--json")
    assert code == 0, err
    return {row["surface"]: row["from"] for row in json.loads(out)}


async def _openapi_paths(queue_dsn: str, tmp_path: Path) -> set[str]:
    env = {"MAESTRO_QUEUES_URL": queue_dsn, "DATAPLANE_JWT_SECRET": JWT_SECRET}
    bff = BffProcess(
        env, str(tmp_path / f"bff-{free_port()}.log"), port=free_port(), args=("-k", "trio")
    )
    try:
        await bff.wait_ready()
        async with httpx.AsyncClient(base_url=bff.base, timeout=10) as http:
            return set((await http.get("/openapi.json")).json()["paths"])
    finally:
        bff.stop()


async def test_the_example_is_found_by_entry_point_and_gone_when_uninstalled(
    queue_dsn: str, tmp_path: Path
) -> None:
    before = await _registered()
    assert {"users", "learnerviews", "accounting", "skills"} <= set(before)
    assert "dataplane-lms" in before["users"] and "dataplane_lms:PACKAGE" in before["users"]
    assert "/api/users/q" in await _openapi_paths(queue_dsn, tmp_path)
    code, _, err = await _run(sys.executable, "-m", "pip", "uninstall", "-y", "dataplane-lms")
    assert code == 0, err
    try:
        assert set(await _registered()) == set()  # probe is off: nothing else is installed
        paths = await _openapi_paths(queue_dsn, tmp_path)
        assert not any(p.startswith(("/api/users", "/api/accounting")) for p in paths)
        code, _, err = await _run(
            sys.executable,
            "-m",
            "dataplane",
            "worker",
            env={"MAESTRO_QUEUES_URL": queue_dsn, "SURFACE_QUEUE_TYPE": "surface-users"},
        )
        lines = err.strip().splitlines()
        assert code != 0 and len(lines) == 1, err
        assert "unknown surface 'users'" in lines[0] and "install the package" in lines[0]
    finally:
        code, _, err = await _run(
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "-e",
            str(EXAMPLE),
        )
        assert code == 0, err
    assert await _registered() == before
