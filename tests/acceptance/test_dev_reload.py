"""``dataplane dev --reload`` (issue #40): a saved file of a surface package restarts
that surface's worker, and the BFF only when what it serves changed; Postgres and the
other workers stay up."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import psutil
import trio

from dataplane.dev.embedded import free_port
from dataplane.dev.reload import affected
from tests.conftest import wait_until

SOURCE = """
from dataplane.surfaces.manifest import Operation, surface

async def which(ctx):
    return {{"v": {v}}}

SURFACE = surface(
    Operation(
        "which",
        1,
        {{"type": "object", "properties": {properties}, "additionalProperties": False}},
        which,
        result={{"type": "object", "properties": {{"v": {{"type": "integer"}}}}}},
    ),
    id="reloadme",
    needs_client_db=False,
)
"""


def write(package: Path, v: int, properties: str = "{}") -> None:
    (package / "__init__.py").write_text(textwrap.dedent(SOURCE.format(v=v, properties=properties)))


def pids(root: int) -> dict[str, int]:
    """The dev's children by role: bff, worker-<surface>, postgres."""
    out: dict[str, int] = {}
    for proc in psutil.Process(root).children(recursive=True):
        try:
            cmd = " ".join(proc.cmdline())
            if "dataplane bff" in cmd:
                out["bff"] = proc.pid
            elif "dataplane worker" in cmd:
                out["worker-" + proc.environ()["SURFACE_QUEUE_TYPE"].removeprefix("surface-")] = (
                    proc.pid
                )
        except (psutil.NoSuchProcess, psutil.AccessDenied, KeyError):
            continue
    return out


async def ask(http: httpx.AsyncClient, token: str) -> Any:
    try:
        resp = await http.post(
            "/api/reloadme/q",
            json={"operation": "which", "params": {}},
            headers={"Authorization": f"Bearer {token}", "Prefer": "wait=2"},
        )
    except httpx.HTTPError:
        return None  # the BFF restarting
    return resp.json().get("result") if resp.status_code == 200 else None


async def test_a_saved_handler_is_served_by_a_restarted_worker_only(tmp_path: Path) -> None:
    package = tmp_path / "src" / "reloadme"
    package.mkdir(parents=True)
    write(package, 1)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MAESTRO_", "DATAPLANE_"))}
    env |= {"DATAPLANE_SURFACES": "reloadme:SURFACE", "PYTHONPATH": str(tmp_path / "src")}
    log = open(tmp_path / "dev.out", "wb")  # noqa: ASYNC230 - closed below
    proc = await trio.lowlevel.open_process(
        [sys.executable, "-m", "dataplane", "dev", "--reload", "--port", str(port)],
        cwd=tmp_path,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    output = tmp_path / "dev.out"
    try:
        await wait_until(
            lambda: "Dev token:" in output.read_text() or proc.poll() is not None, within=180
        )
        text = output.read_text()
        assert proc.poll() is None and "Reload:         on" in text, text
        token = re.search(r"Dev token:\s+(\S+)", text).group(1)  # type: ignore[union-attr]
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as http:
            await wait_until(lambda: "reload: watching" in output.read_text(), within=30)
            assert await ask(http, token) == {"v": 1}
            before = pids(proc.pid)
            assert {"bff", "worker-reloadme", "worker-probe"} <= before.keys(), before

            write(package, 2)  # the handler changed, nothing the BFF serves did
            await until(lambda: ask(http, token), {"v": 2})
            after = pids(proc.pid)
            assert after["worker-reloadme"] != before["worker-reloadme"]
            assert after["bff"] == before["bff"] and after["worker-probe"] == before["worker-probe"]
            assert "worker-reloadme restarted: reloadme's code changed" in output.read_text()

            write(package, 2, '{"x": {"type": "integer"}}')  # a new parameter: the BFF's too
            await until(lambda: _openapi(http), True)
            assert pids(proc.pid)["bff"] != before["bff"]
            await until(lambda: ask(http, token), {"v": 2})
        proc.send_signal(signal.SIGINT)
        with trio.fail_after(10):
            await proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
        log.close()


async def _openapi(http: httpx.AsyncClient) -> bool:
    """Whether /openapi.json declares the new parameter ``x``."""
    try:
        resp = await http.get("/openapi.json")
    except httpx.HTTPError:
        return False
    paths = resp.json().get("paths", {}) if resp.status_code == 200 else {}
    return '"x": {"type": "integer"}' in json.dumps(paths.get("/api/reloadme/q", ""))


async def until(probe: Callable[[], Awaitable[Any]], wanted: Any, within: float = 30) -> None:
    """Until ``probe()`` answers ``wanted`` (a reload takes a restart or two)."""
    with trio.fail_after(within):
        while (await probe()) != wanted:  # noqa: ASYNC110 - a process to ask, not an event
            await trio.sleep(0.1)


def test_a_change_concerns_the_surfaces_of_its_package(tmp_path: Path) -> None:
    dirs = {tmp_path / "a": {"one", "two"}, tmp_path / "b": {"three"}}
    assert affected([str(tmp_path / "a" / "x.py")], dirs) == {"one", "two"}
    assert affected([str(tmp_path / "b" / "sql" / "q.sql")], dirs) == {"three"}
    assert affected([str(tmp_path / "c.py")], dirs) == set()
