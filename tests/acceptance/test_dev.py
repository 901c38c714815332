"""``dataplane dev`` from an empty directory: it answers, and Ctrl-C leaves nothing."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import psutil
import trio

from dataplane.dev.embedded import free_port
from tests.acceptance.test_bff import poll_until_done
from tests.conftest import wait_until


async def test_dev_answers_a_real_query_and_sigint_leaves_nothing(tmp_path: Path) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MAESTRO_", "DATAPLANE_"))}
    log = open(tmp_path / "dev.out", "wb")  # noqa: ASYNC230 - closed below
    proc = await trio.lowlevel.open_process(
        [sys.executable, "-m", "dataplane", "dev", "--port", str(port)],
        cwd=tmp_path,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        output = tmp_path / "dev.out"
        await wait_until(
            lambda: "Dev token:" in output.read_text() or proc.poll() is not None, within=180
        )
        text = output.read_text()
        assert proc.poll() is None, text
        assert "Running:" in text and "worker-users" in text and "worker-probe" in text
        token = re.search(r"Dev token:\s+(\S+)", text).group(1)  # type: ignore[union-attr]
        descendants = psutil.Process(proc.pid).children(recursive=True)
        assert len(descendants) >= 6  # the BFF and a worker per surface
        pg_pid = int((tmp_path / ".dataplane" / "pg" / "postmaster.pid").read_text().split()[0])
        assert psutil.pid_exists(pg_pid)

        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as http:
            resp = await http.post(
                "/api/users/q",
                json={"operation": "list", "params": {"limit": 3}},
                headers={"Authorization": f"Bearer {token}"},
            )
            assert resp.status_code == 202, resp.text
            with trio.fail_after(30):
                answer = await poll_until_done(http, resp.json()["pollUrl"])
        assert len(answer["result"]["rows"]) == 3, json.dumps(answer)[:500]

        proc.send_signal(signal.SIGINT)
        with trio.fail_after(5 + 2):  # Ctrl-C stops everything within 5 s (+ slack)
            await proc.wait()
        alive = [p for p in descendants if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        assert alive == [], alive
        assert not psutil.pid_exists(pg_pid) or psutil.Process(pg_pid).status() == "zombie"
    finally:
        if proc.poll() is None:
            proc.kill()
        log.close()
