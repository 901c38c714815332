"""A real Prometheus for the tests (Debian's ``prometheus``, ``promtool``): its config
written to a temp dir, 1 s scrapes and rule evaluations, killed on exit. Shared by
tests/acceptance/test_prometheus.py and tests/acceptance/test_alerts_fire.py."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
import yaml

from dataplane.dev.embedded import free_port
from tests.conftest import wait_until

ROOT = Path(__file__).resolve().parents[1]
ALERTS = ROOT / "dashboards" / "alerts.yaml"
SLO = ROOT / "dashboards" / "slo.yaml"
INSTALL = "apt-get update && apt-get install -y prometheus prometheus-alertmanager"
SCRAPE_SECONDS = 1


def binary(name: str) -> str:
    path = shutil.which(name) or (
        f"/usr/bin/{name}" if os.path.exists(f"/usr/bin/{name}") else None
    )
    if path is None:
        pytest.fail(f"{name} is missing: `{INSTALL}`")
    return path


async def promtool(*args: str, stdin: bytes = b"") -> tuple[int, str]:
    """Run ``promtool``; (exit status, what it printed)."""
    with trio.fail_after(30):
        done = await trio.run_process(
            [binary("promtool"), *args],
            stdin=stdin,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    return done.returncode, (done.stdout + done.stderr).decode().strip()


async def promtool_check(text: str, where: str) -> None:
    """``promtool check metrics`` on one scrape: clean, not a single lint."""
    status, lint = await promtool("check", "metrics", stdin=text.encode())
    assert status == 0 and not lint, f"promtool check metrics on {where}:\n{lint}"


class Prometheus:
    def __init__(self, base: str, http: httpx.AsyncClient) -> None:
        self.base = base
        self.http = http

    async def query(self, expr: str) -> list[dict[str, Any]]:
        resp = await self.http.get(f"{self.base}/api/v1/query", params={"query": expr})
        body = resp.json()
        assert resp.status_code == 200 and body["status"] == "success", (expr, body)
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    async def value(self, expr: str) -> float | None:
        result = await self.query(expr)
        return float(result[0]["value"][1]) if result else None

    async def wait_for(self, expr: str, within: float = 30.0) -> list[dict[str, Any]]:
        """Wait until ``expr`` has data (e.g. ``up == 1``, ``metric > 0``)."""
        found: list[dict[str, Any]] = []

        async def has_data() -> bool:
            found[:] = await self.query(expr)
            return bool(found)

        await wait_until(has_data, within=within, interval=0.25)
        return found


@asynccontextmanager
async def prometheus(
    tmp_path: Path,
    targets: Mapping[str, list[str]],
    *,
    rule_files: Sequence[Path] = (ALERTS,),
    external_labels: Mapping[str, str] | None = None,
    alertmanager: str | None = None,
) -> AsyncIterator[Prometheus]:
    """A Prometheus scraping ``targets`` (job -> host:port list) every second, with
    ``rule_files`` loaded (the alert rules by default) and evaluated every second,
    sending its alerts to ``alertmanager`` (host:port) when given; killed on exit."""
    port = free_port()
    config: dict[str, Any] = {
        "global": {
            "scrape_interval": f"{SCRAPE_SECONDS}s",
            "scrape_timeout": f"{SCRAPE_SECONDS}s",
            "evaluation_interval": f"{SCRAPE_SECONDS}s",
            **({"external_labels": dict(external_labels)} if external_labels else {}),
        },
        "rule_files": [str(path) for path in rule_files],
        "scrape_configs": [
            {"job_name": job, "static_configs": [{"targets": hosts}]}
            for job, hosts in targets.items()
        ],
    }
    if alertmanager is not None:
        config["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": [alertmanager]}]}]}
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump(config))
    status, said = await promtool("check", "config", str(path))
    assert status == 0, said
    log = open(tmp_path / "prometheus.log", "wb")  # noqa: ASYNC230 - closed below
    proc = await trio.lowlevel.open_process(
        [
            binary("prometheus"),
            f"--config.file={path}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient(timeout=10) as http:

            async def ready() -> bool:
                assert proc.poll() is None, (tmp_path / "prometheus.log").read_text()
                try:
                    return (await http.get(f"{base}/-/ready")).status_code == 200
                except httpx.HTTPError:
                    return False

            await wait_until(ready, within=30, interval=0.1)
            prom = Prometheus(base, http)
            count = sum(len(hosts) for hosts in targets.values())
            await prom.wait_for(f"count(up == 1) == {count}")
            yield prom
    finally:
        proc.kill()
        with trio.CancelScope(shield=True), trio.move_on_after(10):
            await proc.wait()
        log.close()


def worker_env(queue_dsn: str, metrics_port: int, **extra: str) -> dict[str, str]:
    return {
        "MAESTRO_QUEUES_URL": queue_dsn,
        "SURFACE_QUEUE_TYPE": "surface-probe",
        "DATAPLANE_PROBE": "1",
        "DATAPLANE_METRICS": "1",
        "DATAPLANE_METRICS_PORT": str(metrics_port),
        "DATAPLANE_QUEUE_SAMPLE_SECONDS": "0.5",
        "DATAPLANE_FAIL_BACKOFF_SECONDS": "0.2",
        "DATAPLANE_IDLE_MS": "200",  # a retry after the back-off is claimed at once
        **extra,
    }


@asynccontextmanager
async def alertmanager(tmp_path: Path, webhook_url: str) -> AsyncIterator[str]:
    """A real Alertmanager (Debian's ``prometheus-alertmanager``) sending every alert,
    one notification per label set, to ``webhook_url`` within about a second (group
    wait and interval 1 s); yields its host:port; killed on exit."""
    port = free_port()
    config = {
        "route": {
            "receiver": "test",
            "group_by": ["..."],  # every alert its own group: one POST each
            "group_wait": "1s",
            "group_interval": "1s",
            "repeat_interval": "1h",
        },
        "receivers": [
            {"name": "test", "webhook_configs": [{"url": webhook_url, "send_resolved": False}]}
        ],
    }
    path = tmp_path / "alertmanager.yml"
    path.write_text(yaml.safe_dump(config))
    with trio.fail_after(30):
        checked = await trio.run_process(
            [binary("amtool"), "check-config", str(path)], capture_stdout=True, check=False
        )
    assert checked.returncode == 0, checked.stdout.decode()
    log = open(tmp_path / "alertmanager.log", "wb")  # noqa: ASYNC230 - closed below
    proc = await trio.lowlevel.open_process(
        [
            binary("prometheus-alertmanager"),
            f"--config.file={path}",
            f"--storage.path={tmp_path / 'alertmanager'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--cluster.listen-address=",  # alone: no gossip port
            "--log.level=warn",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        async with httpx.AsyncClient(timeout=10) as http:

            async def ready() -> bool:
                assert proc.poll() is None, (tmp_path / "alertmanager.log").read_text()
                try:
                    return (await http.get(f"http://127.0.0.1:{port}/-/ready")).status_code == 200
                except httpx.HTTPError:
                    return False

            await wait_until(ready, within=30, interval=0.1)
        yield f"127.0.0.1:{port}"
    finally:
        proc.kill()
        with trio.CancelScope(shield=True), trio.move_on_after(10):
            await proc.wait()
        log.close()
