"""``dataplane openapi``: the document ``/openapi.json`` serves, written without a server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import trio


def openapi_cli(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``python -m dataplane openapi ARGS`` in a child process, this environment plus ENV."""
    return subprocess.run(
        [sys.executable, "-m", "dataplane", "openapi", *args],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )


async def test_the_cli_writes_what_the_bff_serves(http: httpx.AsyncClient, tmp_path: Path) -> None:
    served = (await http.get("/openapi.json")).json()
    printed = (await trio.to_thread.run_sync(openapi_cli)).stdout
    assert json.loads(printed) == served
    assert {"/api/probe/q", "/api/users/q"} <= set(served["paths"])  # probe and the LMS
    # Stable text: sorted keys, indented, one final newline (a checked-in copy diffs cleanly).
    assert printed == json.dumps(served, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    out = tmp_path / "openapi.json"
    done = await trio.to_thread.run_sync(openapi_cli, "--out", str(out))
    assert done.stdout == "" and f"wrote {out}" in done.stderr
    assert out.read_text(encoding="utf-8") == printed


def test_the_registry_chooses_the_surfaces(tmp_path: Path) -> None:
    """DATAPLANE_SURFACES and DATAPLANE_PROBE choose the surfaces, as for the BFF."""
    only_lms = json.loads(
        openapi_cli(DATAPLANE_SURFACES="dataplane_lms:PACKAGE", DATAPLANE_PROBE="0").stdout
    )
    surfaces = {p.split("/")[2] for p in only_lms["paths"] if p.startswith("/api/")}
    assert surfaces == {"accounting", "learnerviews", "skills", "users"}
    assert "users.list.result" in only_lms["components"]["schemas"]
    with_probe = json.loads(
        openapi_cli(DATAPLANE_SURFACES="dataplane_lms:PACKAGE", DATAPLANE_PROBE="1").stdout
    )
    assert "/api/probe/q" in with_probe["paths"]


def test_a_reader_that_went_away_ends_the_command_quietly() -> None:
    """``dataplane openapi | head -c 10``: stdout's reader is gone before the command
    writes. It ends as a shell tool ends on SIGPIPE (141), without a traceback."""
    read, write = os.pipe()
    os.close(read)  # nobody reads: the first write fails with EPIPE
    try:
        done = subprocess.run(
            [sys.executable, "-m", "dataplane", "openapi"],
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
        )
    finally:
        os.close(write)
    assert (done.returncode, done.stderr) == (141, "")
