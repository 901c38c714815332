"""``dataplane dev`` from an empty directory: it answers, and Ctrl-C leaves nothing;
``--base-port`` pins every port it listens on; the ``export`` lines it prints are all a
second shell's CLI needs; a failing handler's error shows in its terminal as it happens."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import psutil
import trio

from dataplane.dev.embedded import free_port
from tests.acceptance.test_bff import poll_until_done
from tests.acceptance.test_prometheus import promtool_check
from tests.conftest import wait_until
from tests.helpers import failing_surface, free_base_port
from tests.otlp import Received, otlp

__all__ = ["otlp"]  # the fixture, imported to be found


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
        # No DATAPLANE_ALLOW_OWNER in env: every process serves as a login of its role.
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
        # The operators' console, as its own role, answers the printed operator token.
        console = re.search(r"Console:\s+(http://\S+)/login", text).group(1)  # type: ignore[union-attr]
        operator = re.search(r"Operator token:\s+(\S+)", text).group(1)  # type: ignore[union-attr]
        async with httpx.AsyncClient(base_url=console, timeout=30) as ops:
            board = await ops.get("/overview.json", headers={"Authorization": f"Bearer {operator}"})
            assert board.status_code == 200, board.text
            refused = await ops.get("/overview.json", headers={"Authorization": f"Bearer {token}"})
            assert refused.status_code == 403  # the staff token is no operator's

        proc.send_signal(signal.SIGINT)
        with trio.fail_after(5 + 2):  # Ctrl-C stops everything within 5 s (+ slack)
            await proc.wait()
        alive = [p for p in descendants if _alive(p)]
        assert alive == [], alive
        assert not _alive(pg_pid)
    finally:
        if proc.poll() is None:
            proc.kill()
        log.close()


def _alive(process: psutil.Process | int) -> bool:
    """Running and not a zombie; one that exits while it is looked at is gone."""
    try:
        if isinstance(process, int):
            process = psutil.Process(process)
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


async def test_dev_serves_every_process_metrics_and_points_them_at_otlp(
    tmp_path: Path, otlp: tuple[str, Received]
) -> None:
    """Each process its own metrics port, printed at startup (with
    DATAPLANE_METRICS_PORT set in the environment, the workers used to crash-loop on
    "address already in use"); ``--otlp`` sends every process's telemetry there."""
    endpoint, received = otlp
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MAESTRO_", "DATAPLANE_"))}
    env.update(
        DATAPLANE_METRICS_PORT=str(free_port()),  # inherited by every child, overridden
        OTEL_BSP_SCHEDULE_DELAY="100",
        OTEL_METRIC_EXPORT_INTERVAL="500",
    )
    out = tmp_path / "dev.out"
    log = open(out, "wb")  # noqa: ASYNC230 - closed below
    proc = await trio.lowlevel.open_process(
        [sys.executable, "-m", "dataplane", "dev", "--port", str(port), "--otlp", endpoint],
        cwd=tmp_path,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        await wait_until(
            lambda: "Dev token:" in out.read_text() or proc.poll() is not None, within=180
        )
        text = out.read_text()
        assert proc.poll() is None, text
        assert f"OTLP:           {endpoint}" in text, text
        metrics = dict(re.findall(r"^    (\S+)\s+(http://127\.0\.0\.1:\d+/metrics)$", text, re.M))
        running = re.search(r"Running:\s+(.*)", text).group(1).split(", ")  # type: ignore[union-attr]
        assert sorted(metrics) == sorted(set(running) - {"console"}), text  # it has none
        assert {"bff", "capcom", "worker-probe", "worker-users"} <= set(metrics), text
        assert len(set(metrics.values())) == len(metrics)  # a port each
        token = re.search(r"Dev token:\s+(\S+)", text).group(1)  # type: ignore[union-attr]

        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as http:
            resp = await http.post(
                "/api/probe/q",
                json={"operation": "echo", "params": {"value": 1}},
                headers={"Authorization": f"Bearer {token}"},
            )
            assert resp.status_code == 202, resp.text
            with trio.fail_after(30):
                await poll_until_done(http, resp.json()["pollUrl"])
            for name, url in metrics.items():
                scrape = await http.get(url)
                assert scrape.status_code == 200, (name, scrape.text)
                await promtool_check(scrape.text, name)
                if name.startswith("worker-"):
                    assert "dataplane_jobs_total{" in scrape.text, name
            # The probe worker ran the job: its own endpoint says so.
            probe = (await http.get(metrics["worker-probe"])).text
            assert re.search(
                r'dataplane_jobs_total\{[^}]*dataplane_outcome="done"[^}]*\} 1\.0', probe
            )

        def services() -> set[str]:
            return {service for service, _span in received.spans}

        await wait_until(lambda: {"dataplane-bff", "dataplane-worker"} <= services(), within=30)
        logs = "".join(
            p.read_text(errors="replace") for p in (tmp_path / ".dataplane" / "logs").iterdir()
        )
        assert "address already in use" not in logs.lower()
        assert "exited with status" not in out.read_text()  # no child restarted

        proc.send_signal(signal.SIGINT)  # how fast it stops: the test above
        with trio.fail_after(30):
            await proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
        log.close()


async def test_dev_pins_every_port_to_the_base_port_and_starts_without_a_warning(
    tmp_path: Path,
) -> None:
    """``--base-port N``: each listener of the stack, Postgres's too, at its offset and
    none elsewhere; the demo page's URL carries the dev token; where XDG_RUNTIME_DIR is
    unset (containers, CI) stderr holds no warning."""
    base = free_base_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MAESTRO_", "DATAPLANE_"))}
    env.pop("XDG_RUNTIME_DIR", None)
    out, err = tmp_path / "dev.out", tmp_path / "dev.err"
    stdout, stderr = open(out, "wb"), open(err, "wb")  # noqa: ASYNC230 - closed below
    proc = await trio.lowlevel.open_process(
        [sys.executable, "-m", "dataplane", "dev", "--base-port", str(base)],
        cwd=tmp_path,
        env=env,
        stdout=stdout,
        stderr=stderr,
    )
    try:
        await wait_until(
            lambda: "Dev token:" in out.read_text() or proc.poll() is not None, within=180
        )
        text = out.read_text()
        assert proc.poll() is None, text + err.read_text()
        token = re.search(r"Dev token:\s+(\S+)", text).group(1)  # type: ignore[union-attr]
        assert f"Demo page:      http://127.0.0.1:{base}/?token={token}\n" in text, text
        running = re.search(r"Running:\s+(.*)", text).group(1).split(", ")  # type: ignore[union-attr]
        workers = [name for name in running if name.startswith("worker-")]
        expected = {"bff": base, "capcom": base + 1}
        expected |= {name: base + 10 + i for i, name in enumerate(workers)}
        metrics = dict(re.findall(r"^    (\S+)\s+http://127\.0\.0\.1:(\d+)/metrics$", text, re.M))
        assert {name: int(p) for name, p in metrics.items()} == expected, text
        assert f"Console:        http://127.0.0.1:{base + 2}/login" in text, text
        queue_db = re.search(r"Queue DB:\s+(.*)", text).group(1)  # type: ignore[union-attr]
        assert f" port={base + 3} " in f" {queue_db} ", queue_db
        # Every port the stack listens on, Postgres's included: the offsets and no other.
        pg_pid = int((tmp_path / ".dataplane" / "pg" / "postmaster.pid").read_text().split()[0])
        wanted = {*expected.values(), base + 2, base + 3}

        def listening() -> set[int]:  # the workers' metrics may still be starting
            tree = [*psutil.Process(proc.pid).children(recursive=True), psutil.Process(pg_pid)]
            return {
                c.laddr.port
                for p in tree
                for c in p.net_connections(kind="tcp")
                if c.status == psutil.CONN_LISTEN
            }

        await wait_until(lambda: listening() >= wanted, within=30)
        assert listening() == wanted, (listening(), text)
        async with httpx.AsyncClient(timeout=30) as http:
            page = await http.get(f"http://127.0.0.1:{base}/?token={token}")
            assert page.status_code == 200 and "<html" in page.text.lower()
            pg = await trio.open_tcp_stream("127.0.0.1", base + 3)  # Postgres on TCP there
            await pg.aclose()
        proc.send_signal(signal.SIGINT)
        with trio.fail_after(30):
            await proc.wait()
        assert "Warning" not in err.read_text(), err.read_text()
        assert err.read_text().startswith("dataplane dev: starting the embedded Postgres")
    finally:
        if proc.poll() is None:
            proc.kill()
        stdout.close()
        stderr.close()


@asynccontextmanager
async def running_dev(
    tmp_path: Path, port: int, env: dict[str, str]
) -> AsyncIterator[tuple[trio.Process, Path, str]]:
    """``dataplane dev --port PORT`` in ``tmp_path`` until its banner is out: the process,
    the file its output goes to, and the banner's text; SIGINT at the end (then a kill)."""
    out = tmp_path / "dev.out"
    log = open(out, "wb")  # noqa: ASYNC230 - closed below
    proc = await trio.lowlevel.open_process(
        [sys.executable, "-m", "dataplane", "dev", "--port", str(port)],
        cwd=tmp_path,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        await wait_until(
            lambda: "Dev token:" in out.read_text() or proc.poll() is not None, within=180
        )
        text = out.read_text()
        assert proc.poll() is None, text
        yield proc, out, text
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            with trio.move_on_after(10):
                await proc.wait()
        if proc.poll() is None:
            proc.kill()
        log.close()


# Run by the second shell's Python (its environment: the printed exports only).
WHO = """import os, psycopg
row = psycopg.connect(os.environ["MAESTRO_QUEUES_URL"]).execute(
    "SELECT current_user, rolsuper, pg_has_role(current_user, 'dataplane_operator', 'member')"
    " FROM pg_roles WHERE rolname = current_user").fetchone()
print(*row)
"""
UNSEALED_INVALIDATION = """import os, sys, psycopg
conn = psycopg.connect(os.environ["MAESTRO_QUEUES_URL"], autocommit=True)
conn.execute("SELECT pg_notify('dataplane_invalidate', %s)", (sys.argv[1],))
"""
UNSEALED_REFUSED = (
    r'^dataplane_invalidations_refused_total\{[^}]*dataplane_reason="unsealed"[^}]*\} (\S+)$'
)


def _printed_exports(text: str) -> dict[str, str]:
    """The ``export NAME=VALUE`` lines of the banner, as a shell reads them."""
    found = {}
    for line in text.splitlines():
        words = shlex.split(line) if line.strip().startswith("export ") else []
        if len(words) == 2:
            name, _, value = words[1].partition("=")
            found[name] = value
    return found


async def test_a_second_shell_runs_the_operator_cli_with_the_printed_exports(
    tmp_path: Path,
) -> None:
    """Exactly the printed exports, in a fresh shell: ``jobs list``, ``queue pause`` and
    ``resume``, ``audit`` as the operator login (no superuser), and ``invalidate``; the
    exported notify secret is the workers' (a tag sealed with it is believed, the same
    tag unsealed refused)."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MAESTRO_", "DATAPLANE_"))}
    async with running_dev(tmp_path, port, env) as (_, _, text):
        exported = _printed_exports(text)
        assert set(exported) == {"MAESTRO_QUEUES_URL", "DATAPLANE_NOTIFY_SECRET"}, text
        assert "user=dataplane_dev_operator" in exported["MAESTRO_QUEUES_URL"]
        lines = [ln.strip() for ln in text.splitlines() if ln.strip().startswith("export ")]
        shell_env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path)}  # nothing else

        async def second_shell(command: str) -> subprocess.CompletedProcess[bytes]:
            script = "\n".join([*lines, f"{shlex.quote(sys.executable)} {command}"])
            return await trio.run_process(
                ["bash", "-c", script],
                env=shell_env,
                cwd=tmp_path,
                capture_stdout=True,
                capture_stderr=True,
                check=False,
            )

        listed = await second_shell("-m dataplane jobs list")
        assert listed.returncode == 0 and listed.stdout.startswith(b"id "), listed.stderr
        paused = await second_shell("-m dataplane queue pause surface-probe")
        assert paused.stdout.strip() == b"surface-probe paused", paused.stderr
        resumed = await second_shell("-m dataplane queue resume surface-probe")
        assert resumed.stdout.strip() == b"surface-probe resumed", resumed.stderr
        audit = await second_shell("-m dataplane audit")
        assert audit.returncode == 0 and audit.stdout.count(b"surface-probe") == 2, audit
        (tmp_path / "who.py").write_text(WHO)
        who = await second_shell("who.py")
        assert who.stdout.split() == [b"dataplane_dev_operator", b"False", b"True"], who

        metrics = re.search(r"worker-probe\s+(http://\S+/metrics)", text).group(1)  # type: ignore[union-attr]

        async def refused() -> float:
            async with httpx.AsyncClient(timeout=10) as http:
                body = (await http.get(metrics)).text
            found = re.search(UNSEALED_REFUSED, body, re.M)
            return float(found.group(1)) if found else 0.0

        before = await refused()
        sealed = await second_shell("-m dataplane invalidate c:acme")  # the export's secret
        assert sealed.returncode == 0 and b"(sealed)" in sealed.stdout, sealed
        (tmp_path / "notify.py").write_text(UNSEALED_INVALIDATION)
        control = await second_shell("notify.py c:acme")  # the same tag, unsealed
        assert control.returncode == 0, control.stderr

        async def control_refused() -> bool:
            return await refused() >= before + 1

        await wait_until(control_refused, within=20)  # heard after the sealed one
        assert await refused() == before + 1  # the sealed one was believed


async def test_a_failing_handler_s_error_shows_in_the_dev_terminal_as_it_happens(
    tmp_path: Path,
) -> None:
    """A surface package of its own whose handler raises: each failed attempt is one
    line in ``dataplane dev``'s own terminal, naming the surface, the operation, the job,
    the innermost frame of the surface's code and the exception, within seconds; the
    worker's log file holds the whole record with its traceback."""
    shop = failing_surface(tmp_path)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MAESTRO_", "DATAPLANE_"))}
    env |= shop.env
    async with running_dev(tmp_path, port, env) as (proc, out, text):
        assert "worker-shop" in text, text
        token = re.search(r"Dev token:\s+(\S+)", text).group(1)  # type: ignore[union-attr]
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as http:
            resp = await http.post(
                "/api/shop/q",
                json={"operation": "quote", "params": {"sku": "oops"}},
                headers={"Authorization": f"Bearer {token}"},
            )
        assert resp.status_code == 202, resp.text
        job = resp.json()["jobId"]
        line = (
            f"dataplane dev: worker-shop: job {job} (shop.quote, attempt 1/5) failed at"
            f" {shop.frame}: KeyError: 'oops'"
        )
        await wait_until(lambda: line in out.read_text(), within=15)
        worker_log = (tmp_path / ".dataplane" / "logs" / "worker-shop.log").read_text()
        record = worker_log[worker_log.index(f"job {job} (shop.quote, attempt 1/5)") :]
        assert "\nTraceback (most recent call last):\n" in record
        assert f'> File "{shop.file}", line ' in record and "\nKeyError: 'oops'\n" in record
        assert " serving surface-shop " in worker_log  # through the pipe, from its start
        proc.send_signal(signal.SIGINT)
        with trio.fail_after(30):
            await proc.wait()
