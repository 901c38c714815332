"""A real Prometheus (Debian's ``prometheus``) scrapes a real BFF, two workers and capcom.

Each test starts the processes on loopback, writes a temporary Prometheus config
(1 s scrapes, ``dashboards/alerts.yaml`` loaded as rules), runs traffic, and asks
Prometheus' HTTP API. Every PromQL expression of every dashboard and every alert rule
must have data; every scrape the test reads passes ``promtool check metrics``; the
rules pass ``promtool check rules``. Nothing skips: without the binaries the tests
fail saying what to install (``.ci/run`` installs the package).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
import yaml

from dataplane.dev.embedded import free_port
from dataplane.queue import QueueClient
from tests.conftest import wait_until
from tests.helpers import JWT_SECRET, BffProcess, WorkerProcess, bearer, read_sse, submit, token
from tests.prom import (
    ALERTS,
    ROOT,
    SCRAPE_SECONDS,
    Prometheus,
    prometheus,
    promtool,
    promtool_check,
    worker_env,
)

DASHBOARDS = sorted((ROOT / "dashboards" / "json").glob("*.json"))
# Grafana's variables, as a 1 s scrape interval makes them.
GRAFANA_VARIABLES = {"$__rate_interval": "30s", "$__range": "5m", "$__interval": "1s"}


def promql_of_dashboards() -> list[tuple[str, str]]:
    """(where, expression) of every Prometheus target of every dashboard."""
    out = []
    for path in DASHBOARDS:
        for panel in json.loads(path.read_text())["panels"]:
            for target in panel.get("targets", []):
                if target.get("datasource", {}).get("type") == "prometheus":
                    out.append((f"{path.name}: {panel['title']}", target["expr"]))
    return out


def alert_rules() -> list[dict[str, Any]]:
    groups = yaml.safe_load(ALERTS.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def grafana(expr: str) -> str:
    for name, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(name, value)
    return expr


def metric_names(expr: str, labels: set[str]) -> set[str]:
    """The metric names ``expr`` reads (identifiers of ours that are not label names)."""
    return set(re.findall(r"\b(?:dataplane|messaging|http|db)_[a-z_]+\b", expr)) - labels


async def scrape_and_check(http: httpx.AsyncClient, urls: Mapping[str, str]) -> dict[str, str]:
    """Fetch every process's ``/metrics`` and lint it with promtool."""
    texts = {}
    for name, url in urls.items():
        resp = await http.get(url)
        assert resp.status_code == 200, (name, resp.text)
        assert resp.headers["content-type"].startswith("text/plain"), name
        await promtool_check(resp.text, f"{name} ({url})")
        texts[name] = resp.text
    return texts


# -- the lazy-series bug -------------------------------------------------------------


async def test_the_first_poison_is_seen_by_increase(
    queue_dsn: str, queue: QueueClient, tmp_path: Path
) -> None:
    """Each counter series exists at 0 from the start, so Prometheus' increase() counts
    its first event (a series born at 1 would show an increase of 0)."""
    port = free_port()
    worker = WorkerProcess(worker_env(queue_dsn, port), str(tmp_path / "worker.log"))
    try:
        await worker.wait_ready()
        async with prometheus(tmp_path, {"worker": [f"127.0.0.1:{port}"]}) as prom:
            poison = 'dataplane_poison_total{dataplane_reason="failed"}'
            # Scraped at 0, twice, before anything was poisoned.
            await prom.wait_for(f"count_over_time({poison}[1m]) >= 2")
            assert await prom.value(f"max_over_time({poison}[1m])") == 0
            async with httpx.AsyncClient(timeout=10) as http:
                await scrape_and_check(http, {"worker": f"http://127.0.0.1:{port}/metrics"})

            await submit(queue, "probe", "fail", {"times": 5}, max_dequeues=1)
            await prom.wait_for(f"{poison} == 1")
            seen = await prom.value(f"sum(increase({poison}[1m]))")
            assert seen is not None and seen >= 0.99, seen
            alerts = await prom.wait_for('ALERTS{alertname="DataplanePoison"}')
            assert alerts[0]["metric"]["messaging_destination_name"] == "surface-probe"
    finally:
        worker.stop()


# -- every dashboard query and alert rule -----------------------------------------------


@pytest.fixture
def capcom_token() -> str:
    return "capcom-test-token-0123456789abcdef"


async def test_every_dashboard_query_and_alert_rule_has_data(
    queue_dsn: str, queue: QueueClient, tmp_path: Path, capcom_token: str
) -> None:
    status, said = await promtool("check", "rules", str(ALERTS))
    assert status == 0 and "SUCCESS" in said, said

    bff_port, capcom_port = free_port(), free_port()
    worker_ports = [free_port(), free_port()]
    capcom = BffProcess(  # stopped with SIGTERM: Hypercorn's parent stops its worker
        {
            "DATAPLANE_CAPCOM_TOKEN": capcom_token,
            "DATAPLANE_CAPCOM_DB_URL": queue_dsn,
            "DATAPLANE_METRICS": "1",
        },
        str(tmp_path / "capcom.log"),
        port=capcom_port,
        args=("-k", "trio"),
        app="dataplane.capcom.app:app",
    )
    bff = BffProcess(
        {
            "MAESTRO_QUEUES_URL": queue_dsn,
            "DATAPLANE_JWT_SECRET": JWT_SECRET,
            "DATAPLANE_PROBE": "1",
            "DATAPLANE_METRICS": "1",
            "DATAPLANE_SWEEP_SECONDS": "1",
            "DATAPLANE_SSE_DEADLINE_SECONDS": "3",
            "DATAPLANE_MAX_DEQUEUES": "2",
        },
        str(tmp_path / "bff.log"),
        port=bff_port,
        args=("-k", "trio"),
    )
    capcom_env = {"DATAPLANE_CAPCOM_URL": capcom.base, "DATAPLANE_CAPCOM_TOKEN": capcom_token}
    workers = [
        WorkerProcess(worker_env(queue_dsn, p, **capcom_env), str(tmp_path / f"worker-{i}.log"))
        for i, p in enumerate(worker_ports)
    ]
    urls = {
        "bff": f"{bff.base}/metrics",
        "capcom": f"{capcom.base}/metrics",
        **{f"worker-{i}": f"http://127.0.0.1:{p}/metrics" for i, p in enumerate(worker_ports)},
    }
    targets = {
        "dataplane-bff": [f"127.0.0.1:{bff_port}"],
        "dataplane-capcom": [f"127.0.0.1:{capcom_port}"],
        "dataplane-worker": [f"127.0.0.1:{p}" for p in worker_ports],
    }
    try:
        await bff.wait_ready()
        for worker in workers:
            await worker.wait_ready()
        async with httpx.AsyncClient(timeout=30) as http:
            await wait_until(
                lambda: _answers(http, f"{capcom.base}/readyz"), within=30, interval=0.1
            )
            await scrape_and_check(http, urls)  # at start: every counter at zero
            async with prometheus(tmp_path, targets) as prom:
                await _traffic(http, bff.base, queue)
                # A type nobody consumes: the no-consumer alert's case.
                await submit(queue, "ghost", "echo", {})
                # A done notify naming no job, as a role outside the plane may send.
                await queue.notify("surface_probe_done", "forged")
                await prom.wait_for("sum(dataplane_notify_rejected_total) >= 1")
                ghost = '{messaging_destination_name="surface-ghost",dataplane_state="ready"}'
                await prom.wait_for(f"dataplane_queue_depth{ghost} == 1")
                await prom.wait_for("sum(dataplane_capcom_received_total) >= 8")
                await prom.wait_for("sum(dataplane_stream_timeouts_total) >= 1")
                await prom.wait_for('sum(dataplane_poison_total{dataplane_reason="failed"}) >= 1')
                await prom.wait_for("sum(dataplane_end_to_end_seconds_count) >= 3")
                await trio.sleep(2 * SCRAPE_SECONDS)  # one more scrape of everything
                await scrape_and_check(http, urls)

                # One elected worker publishes the queue depth, not both.
                exporters = await prom.query("count by (instance) (dataplane_queue_depth)")
                assert len(exporters) == 1, exporters

                missing = []
                for where, expr in promql_of_dashboards():
                    if not await prom.query(grafana(expr)):
                        missing.append(f"{where}: {expr}")
                assert not missing, "no data for:\n" + "\n".join(missing)

                await _check_alert_rules(prom)
                await _check_http_metric(prom)
    finally:
        for worker in workers:
            worker.stop()
        bff.stop()
        capcom.stop()


async def _answers(http: httpx.AsyncClient, url: str) -> bool:
    try:
        return (await http.get(url)).status_code == 200
    except httpx.HTTPError:
        return False


async def _traffic(http: httpx.AsyncClient, base: str, queue: QueueClient) -> None:
    """Answers, a cache hit, a retried failure, a poison, an expected error, a TIMEOUT,
    a poll, a 404 and a 401: every outcome the dashboards show."""
    headers = bearer(token())

    async def post(operation: str, params: dict[str, Any]) -> dict[str, Any]:
        resp = await http.post(
            f"{base}/api/probe/q",
            json={"operation": operation, "params": params},
            headers=headers,
        )
        assert resp.status_code == 202, resp.text
        body: dict[str, Any] = resp.json()
        return body

    async def stream(job: dict[str, Any]) -> str:
        status, _headers, events = await read_sse(http, base + job["streamUrl"])
        assert status == 200 and events, (status, events)
        final = events[-1]
        return str(final.json.get("code") or final.name)

    for n in range(3):
        assert await stream(await post("echo", {"value": n})) == "done"
    assert await stream(await post("cached", {})) == "done"
    assert await stream(await post("cached", {})) == "done"  # from the TTL cache
    assert await stream(await post("fail", {"times": 1})) == "done"  # one failed attempt
    assert await stream(await post("fail", {"times": 5})) == "POISON"  # max_dequeues 2
    assert await stream(await post("reject", {"status": 403})) == "done"
    assert await stream(await post("sleep", {"ms": 3500})) == "TIMEOUT"  # deadline 3 s
    job = await post("echo", {"value": "polled"})
    await wait_until(lambda: _status(http, base + job["pollUrl"], 200), within=20, interval=0.05)
    assert (await http.get(f"{base}/api/nowhere/q/x")).status_code in (401, 404)
    assert (await http.post(f"{base}/api/probe/q", json={})).status_code == 401


async def _status(http: httpx.AsyncClient, url: str, status: int) -> bool:
    return (await http.get(url)).status_code == status


async def _check_alert_rules(prom: Prometheus) -> None:
    """Prometheus evaluates every rule without error; every metric a rule reads has
    data; the rules this traffic must trigger are active."""
    resp = await prom.http.get(f"{prom.base}/api/v1/rules")
    loaded = {
        rule["name"]: rule for group in resp.json()["data"]["groups"] for rule in group["rules"]
    }
    rules = alert_rules()
    labels = set((await prom.http.get(f"{prom.base}/api/v1/labels")).json()["data"])
    assert sorted(loaded) == sorted(r["alert"] for r in rules)
    for rule in rules:
        name = rule["alert"]
        await wait_until(lambda n=name: _evaluated(prom, n), within=10, interval=0.25)
        assert loaded[name]["health"] in ("ok", "unknown"), loaded[name]
        names = metric_names(rule["expr"], labels)
        assert names, f"{name}: reads no dataplane metric"
        for metric in names:
            assert await prom.query(metric), f"{name}: no data for {metric}"
        assert rule["annotations"]["summary"] and rule["annotations"]["description"], name
    active = {
        (a["metric"]["alertname"], a["metric"].get("messaging_destination_name"))
        for a in await prom.wait_for('ALERTS{alertname="DataplaneNoConsumer"}')
    }
    assert ("DataplaneNoConsumer", "surface-ghost") in active, active
    poison = await prom.wait_for('ALERTS{alertname="DataplanePoison"}')
    assert {a["metric"]["messaging_destination_name"] for a in poison} == {"surface-probe"}
    rejected = await prom.wait_for('ALERTS{alertname="DataplaneNotifyRejected"}')
    assert {a["metric"]["job"] for a in rejected} == {"dataplane-bff"}, rejected
    # surface-ghost has work and no worker at all: no ready replica either (pending
    # for its 3 minutes, firing after).
    ghost = await prom.wait_for('ALERTS{alertname="DataplaneNoReadyWorker"}')
    assert {a["metric"]["messaging_destination_name"] for a in ghost} == {"surface-ghost"}
    # A healthy stack raises nothing else.
    others = await prom.query(
        'ALERTS{alertname!~"DataplaneNoConsumer|DataplanePoison|DataplaneNotifyRejected'
        '|DataplaneNoReadyWorker"}'
    )
    assert others == [], others


async def _evaluated(prom: Prometheus, name: str) -> bool:
    resp = await prom.http.get(f"{prom.base}/api/v1/rules")
    for group in resp.json()["data"]["groups"]:
        for rule in group["rules"]:
            if rule["name"] == name:
                return bool(rule["health"] == "ok" and not rule.get("lastError"))
    return False


async def _check_http_metric(prom: Prometheus) -> None:
    """http.server.request.duration: route templates (never a job id), methods and
    status codes, from the BFF and capcom."""
    series = await prom.query("http_server_request_duration_seconds_count")
    routes = {s["metric"].get("http_route") for s in series}
    assert "/api/{surface}/q" in routes and "/api/{surface}/q/{jobId}/stream" in routes
    assert "/worker/job-finished" in routes, routes  # capcom
    assert not any(r and re.search(r"[0-9a-f]{8}-", r) for r in routes), routes
    statuses = {
        (s["metric"]["http_request_method"], s["metric"].get("http_response_status_code"))
        for s in series
    }
    assert {("POST", "202"), ("GET", "200"), ("POST", "401")} <= statuses, statuses
    jobs = {s["metric"]["job"] for s in series}
    assert {"dataplane-bff", "dataplane-capcom"} <= jobs
