"""Capcom never answers 5xx for a report, whatever is in it (hypothesis, against a
real ``hypercorn -k trio dataplane.capcom.app:app`` process): a report it cannot store
is a 400 naming the field; numbers out of range (``10**400`` ms, a year 10000
``finished_at``) included."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from dataplane.dev.embedded import free_port

TOKEN = "capcom-property-token-0123456789"
PROPERTY = settings(
    max_examples=80,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
anything = st.characters(min_codepoint=0, max_codepoint=0x10FFFF, exclude_categories=())
numbers = (
    st.integers(min_value=-(10**500), max_value=10**500)
    | st.floats(allow_nan=False, allow_infinity=False)  # JSON has no infinity
    | st.sampled_from([10**400, -1, 0, 2**63, 2**31, 1e308, 253_402_300_800])
)
values = st.none() | st.booleans() | numbers | st.text(anything, max_size=20)


def good() -> dict[str, Any]:
    return {
        "job_id": str(uuid.uuid4()),
        "type": "surface-probe",
        "operation": "echo",
        "outcome": "done",
        "wall_ms": 1.5,
        "cpu_ms": 0.5,
        "rss_bytes": 1 << 20,
        "queue_wait_ms": 0.4,
        "cache": "bypass",
        "coalesced": False,
        "dequeue_count": 1,
        "worker_id": "w",
        "finished_at": time.time(),
    }


@pytest.fixture
def capcom_process(queue_dsn: str, tmp_path: Path) -> Iterator[httpx.Client]:
    port = free_port()
    env = {**os.environ, "DATAPLANE_CAPCOM_TOKEN": TOKEN, "DATAPLANE_CAPCOM_DB_URL": queue_dsn}
    env.pop("DATAPLANE_METRICS", None)
    log = open(tmp_path / "capcom.log", "wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "hypercorn", "-k", "trio", "-b", f"127.0.0.1:{port}",
         "dataplane.capcom.app:app"],
        env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
            deadline = time.monotonic() + 30
            while True:  # a bounded wait for the process to answer
                try:
                    if client.get("/readyz").status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                assert proc.poll() is None and time.monotonic() < deadline, "capcom did not start"
                time.sleep(0.1)
            client.headers["Authorization"] = f"Bearer {TOKEN}"
            yield client
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()


@PROPERTY
@given(field=st.sampled_from(sorted(good())), value=values)
@example(field="wall_ms", value=10**400)
@example(field="finished_at", value=10**400)
@example(field="type", value="a\udfffb")
def test_no_report_field_value_reaches_a_5xx(
    capcom_process: httpx.Client, field: str, value: Any
) -> None:
    report = {**good(), field: value}
    import json

    body = json.dumps(report, ensure_ascii=True).encode()  # lone surrogates as \\ud800
    resp = capcom_process.post(
        "/worker/job-finished", content=body, headers={"Content-Type": "application/json"}
    )
    assert resp.status_code in (204, 400), (report, resp.status_code, resp.text)
    if resp.status_code == 400:
        assert resp.json()["error"]["code"] == "BAD_REQUEST"
        assert field in resp.json()["error"]["message"]
