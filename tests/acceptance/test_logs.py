"""Logs of real processes (BFF, worker, capcom) with ``DATAPLANE_LOG_FORMAT=json``: one
JSON object a line, the request's trace id on the lines logged for it (the trace id
as a real OTLP/HTTP receiver got it), one access line per BFF request with its
fields, a failed attempt's one record with its traceback, and never a token."""

from __future__ import annotations

import inspect
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
import trio

from dataplane.dev.embedded import free_port
from dataplane.surfaces import probe
from tests.conftest import wait_until
from tests.helpers import BffProcess, WorkerProcess, bearer, capcom_process, read_sse, token
from tests.otlp import Received, attrs, otlp

__all__ = ["otlp"]  # the fixture, imported to be found

OTEL = {"OTEL_BSP_SCHEDULE_DELAY": "100", "OTEL_METRIC_EXPORT_INTERVAL": "500"}
DATAPLANE_CAPCOM_TOKEN = "capcom-test-token-0123456789"


@pytest.fixture
def json_stack(
    bff_env: dict[str, str], tmp_path: Path
) -> Iterator[tuple[dict[str, str], list[Any]]]:
    env = {**bff_env, **OTEL, "DATAPLANE_LOG_FORMAT": "json"}
    started: list[Any] = []
    yield env, started
    for proc in started:
        proc.stop()


def _line_of(function: Any, text: str) -> int:
    lines, start = inspect.getsourcelines(function)
    return start + next(i for i, line in enumerate(lines) if text in line)


def json_lines(path: Path) -> list[dict[str, Any]]:
    """Every line of a log file, each of which must be one JSON object."""
    out = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            raise AssertionError(f"{path.name}:{number} is not JSON: {line!r}") from None
        assert isinstance(record, dict), line
        assert {"timestamp", "level", "logger", "message"} <= record.keys(), line
        out.append(record)
    return out


async def test_json_logs_carry_the_request_trace_and_no_token(
    otlp: tuple[str, Received],
    json_stack: tuple[dict[str, str], list[Any]],
    tmp_path: Path,
) -> None:
    endpoint, received = otlp
    base_env, started = json_stack
    env = {**base_env, "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint}
    capcom = capcom_process(base_env, str(tmp_path / "capcom.log"), DATAPLANE_CAPCOM_TOKEN)
    started.append(capcom)
    bff = BffProcess(env, str(tmp_path / "bff.log"), port=free_port(), args=("-k", "trio"))
    started.append(bff)
    worker_env = {
        **env,
        "SURFACE_QUEUE_TYPE": "surface-probe",
        "DATAPLANE_FAIL_BACKOFF_SECONDS": "0",
        "DATAPLANE_CAPCOM_URL": capcom.base,
        "DATAPLANE_CAPCOM_TOKEN": DATAPLANE_CAPCOM_TOKEN,
    }
    worker = WorkerProcess(worker_env, str(tmp_path / "worker.log"))
    started.append(worker)
    await capcom.wait_ready()
    await bff.wait_ready()
    await worker.wait_ready()

    jwt = token(staff=True)
    async with httpx.AsyncClient(base_url=bff.base, timeout=30) as http:
        resp = await http.post(
            "/api/probe/q", json={"operation": "fail", "params": {"times": 1}}, headers=bearer(jwt)
        )
        job = resp.json()
        _, _, events = await read_sse(http, job["streamUrl"])
        assert events[-1].name == "done"  # the second attempt answered
        assert (await http.get(job["pollUrl"])).status_code == 200
        refused = await http.post(
            "/api/probe/q", json={"operation": "nope", "params": {}}, headers=bearer(jwt)
        )
        assert refused.status_code == 404
    job_id = job["jobId"]
    stream_token = parse_qs(urlsplit(job["streamUrl"]).query)["token"][0]

    def posted() -> list[Any]:
        return [
            s
            for svc, s in received.named("POST /api/{surface}/q")
            if attrs(s).get("messaging.message.id") == job_id
        ]

    await wait_until(lambda: bool(posted()), within=20)
    trace_id = posted()[0].trace_id.hex()

    bff_log, worker_log, capcom_log = (
        tmp_path / "bff.log",
        tmp_path / "worker.log",
        tmp_path / "capcom.log",
    )

    def access(method: str, route: str) -> list[dict[str, Any]]:
        return [
            r
            for r in json_lines(bff_log)
            if r["logger"] == "dataplane.access" and r["method"] == method and r["route"] == route
        ]

    await wait_until(lambda: len(access("POST", "/api/{surface}/q")) == 2, within=20)
    await wait_until(lambda: "job-finished" in capcom_log.read_text(), within=20)
    # Stopped (in threads: an exporter flushing on exit posts to the receiver served by
    # this very event loop), so the whole files are read below.
    for proc in started:
        await trio.to_thread.run_sync(proc.stop)

    # The POST's access line: its fields, in the request's trace.
    (accepted,) = (r for r in access("POST", "/api/{surface}/q") if r["status"] == 202)
    assert accepted["level"] == "INFO"
    assert accepted["job_id"] == job_id and accepted["client"] == "acme"
    assert accepted["coalesced"] is False
    assert isinstance(accepted["duration_ms"], float) and accepted["duration_ms"] > 0
    assert accepted["trace_id"] == trace_id and len(accepted["span_id"]) == 16
    (stream,) = access("GET", "/api/{surface}/q/{jobId}/stream")
    assert stream["status"] == 200 and stream["outcome"] == "done"
    assert stream["job_id"] == job_id and stream["trace_id"] == trace_id
    (poll,) = access("GET", "/api/{surface}/q/{jobId}")
    assert poll["status"] == 200 and poll["job_id"] == job_id and poll["client"] == "acme"

    # The failed attempt's one record: in the request's trace, with its traceback and
    # the fields that name the job, its attempt, surface and operation.
    worker_lines = json_lines(worker_log)
    (failed,) = (r for r in worker_lines if "failed" in r["message"] and job_id in r["message"])
    assert failed["level"] == "ERROR" and failed["logger"] == "dataplane.worker.failures"
    assert failed["trace_id"] == trace_id and len(failed["span_id"]) == 16
    assert (failed["job_id"], failed["attempt"], failed["max_dequeues"]) == (job_id, 1, 5)
    assert (failed["surface"], failed["operation"]) == ("probe", "fail")
    assert failed["error_type"] == "dataplane.surfaces.probe.ProbeFailure"
    line = _line_of(probe.fail, "raise ProbeFailure")
    assert failed["frame"] == f"dataplane/surfaces/probe.py:{line} in fail"
    assert failed["message"] == (
        f"job {job_id} (probe.fail, attempt 1/5) failed at {failed['frame']}:"
        " ProbeFailure: probe.fail: attempt 1 of 1"
    )
    tb = failed["traceback"].splitlines()
    assert tb[0] == "Traceback (most recent call last):"
    assert tb[-1] == "dataplane.surfaces.probe.ProbeFailure: probe.fail: attempt 1 of 1"
    assert f'> File "{probe.__file__}", line {line}, in fail' in tb

    # Hypercorn's own lines and capcom's come out in the same format.
    assert any(r["logger"] == "hypercorn.error" for r in json_lines(bff_log))
    capcom_lines = json_lines(capcom_log)
    assert any(
        r["logger"] == "dataplane.access"
        and r["route"] == "/worker/job-finished"
        and r["status"] == 204
        for r in capcom_lines
    )

    # Never a token; no per-request httpx chatter (the worker posts to capcom with httpx).
    for path in (bff_log, worker_log, capcom_log):
        text = path.read_text()
        for secret in (jwt, stream_token, DATAPLANE_CAPCOM_TOKEN, "token="):
            assert secret not in text, (path.name, secret)
    assert not any(r["logger"] == "httpx" for r in worker_lines)


async def test_text_is_the_default_with_one_access_line_per_request(
    bff_env: dict[str, str], tmp_path: Path
) -> None:
    bff = BffProcess(bff_env, str(tmp_path / "bff.log"), port=free_port(), args=("-k", "trio"))
    try:
        await bff.wait_ready()
        async with httpx.AsyncClient(base_url=bff.base, timeout=30) as http:
            resp = await http.get("/api/probe/q/00000000-0000-0000-0000-000000000000?token=abc")
            assert resp.status_code == 401
        await wait_until(lambda: "401" in bff.output(), within=10)
    finally:
        bff.stop()
    lines = [line for line in bff.output().splitlines() if "dataplane.access" in line]
    (refused,) = [line for line in lines if "/api/" in line]
    assert " INFO dataplane.access: GET /api/{surface}/q/{jobId} 401 " in refused
    assert "abc" not in bff.output()
    assert not any(line.startswith("{") for line in bff.output().splitlines())
