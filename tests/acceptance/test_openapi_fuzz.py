"""Schemathesis against the live /openapi.json: no 5xx, and every response
matches the published schema (statuses, content types, bodies, headers). Its path
parameters are drawn from the values an HTTP edge treats specially too
(tests/schemathesis_hooks.py): a job id with a backslash was answered a 400 that the
document did not name, and ten examples per operation never drew one."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from dataplane.dev.embedded import free_port
from tests.helpers import BffProcess, token

HOOKS = Path(__file__).resolve().parents[1] / "schemathesis_hooks.py"

CHECKS = ",".join(
    [
        "not_a_server_error",
        "status_code_conformance",
        "content_type_conformance",
        "response_schema_conformance",
        "response_headers_conformance",
    ]
)


async def test_schemathesis_finds_no_server_error_and_no_schema_break(
    bff_env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    nursery: trio.Nursery,
    spawn_worker: Callable[..., Any],
    tmp_path: Path,
) -> None:
    bff = BffProcess(
        # A stream or a `Prefer: wait` POST for a surface no worker serves waits for its
        # deadline; the fuzzer sends ~120 such POSTs (`wait=2`, the schema's example):
        # capped at 1 s they still take the waiting path and answer 202 after the wait.
        {
            **bff_env,
            "DATAPLANE_SSE_DEADLINE_SECONDS": "1",
            "DATAPLANE_MAX_PREFER_WAIT_SECONDS": "1",
        },
        str(tmp_path / "bff.log"),
        port=free_port(),
        args=("-k", "trio"),
    )
    base = bff.base
    await bff.wait_ready()
    await spawn_worker()
    async with httpx.AsyncClient(base_url=base) as http:
        spec = (await http.get("/openapi.json")).json()
    assert spec["openapi"] == "3.1.0" and "/api/probe/q" in spec["paths"]
    st = shutil.which("schemathesis", path=str(Path(sys.executable).parent))
    assert st is not None, "schemathesis is a test dependency"
    with trio.fail_after(600):
        result = await trio.run_process(
            [
                st,
                "run",
                f"{base}/openapi.json",
                "-H",
                f"Authorization: Bearer {token(staff=True)}",
                "--checks",
                CHECKS,
                "--max-examples",
                "10",
                "--phases",
                "examples,coverage,fuzzing",
                "--request-timeout",
                "10",
                # One of ~900 fuzzed requests (a GET with a body on a POST-only route) once
                # went unanswered; it has not reproduced since. A network error is not what
                # this test judges (5xx and schema breaks are): retry it once.
                "--request-retries",
                "1",
                "--seed",
                "1",
                "--generation-database",
                "none",
            ],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            cwd=str(tmp_path),
            env={**os.environ, "SCHEMATHESIS_HOOKS": str(HOOKS)},
        )
    out = result.stdout.decode(errors="replace") + result.stderr.decode(errors="replace")
    (tmp_path / "schemathesis.txt").write_text(out)
    bff.stop()
    assert result.returncode == 0, out[-6000:]
