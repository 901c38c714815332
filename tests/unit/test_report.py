"""The job report is declared once: the sender's JSON, the receiver's checks and the
worker_runs INSERT all follow JobReport's fields."""

from __future__ import annotations

import dataclasses
import json
import re
import time
import uuid

import pytest

from dataplane.db.sql import q
from telemetry.report import (
    CacheStatus,
    JobReport,
    Outcome,
    ReportError,
    check_report,
    encode_report,
    insert_params,
)


def _report() -> JobReport:
    return JobReport(
        job_id=str(uuid.uuid4()),
        type="surface-probe",
        operation="echo",
        outcome=Outcome.DONE,
        wall_ms=1.5,
        cpu_ms=0.5,
        rss_bytes=1 << 20,
        queue_wait_ms=0.7,
        cache=CacheStatus.BYPASS,
        coalesced=False,
        dequeue_count=1,
        worker_id="w",
        finished_at=time.time(),
    )


def test_the_insert_names_the_report_fields_in_order() -> None:
    statement = q("worker_run_insert")
    columns = re.search(r"INSERT INTO worker_runs \(([^)]*)\)", statement)
    assert columns is not None
    names = [c.strip() for c in columns.group(1).split(",")]
    assert names == [f.name for f in dataclasses.fields(JobReport)]
    for name in names:
        assert f"%({name})s" in statement


def test_what_the_sender_encodes_the_receiver_accepts() -> None:
    report = _report()
    checked = check_report(json.loads(encode_report(report)))
    assert checked["job_id"] == uuid.UUID(report.job_id)
    assert checked["outcome"] == "done" and checked["cache"] == "bypass"
    assert set(insert_params([checked])) == {f.name for f in dataclasses.fields(JobReport)}


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("outcome", "exploded"),
        ("wall_ms", 10**400),
        ("finished_at", 10**400),
        ("rss_bytes", -1),
        ("type", "a\x00b"),
    ],
)
def test_each_field_is_checked(field: str, value: object) -> None:
    body = json.loads(encode_report(_report()))
    body[field] = value
    with pytest.raises(ReportError, match=field):
        check_report(body)


def test_the_trace_id_is_optional_and_checked() -> None:
    body = json.loads(encode_report(_report()))
    assert body["trace_id"] is None
    del body["trace_id"]
    assert check_report(body)["trace_id"] is None
    trace_id = "0af7651916cd43dd8448eb211c80319c"
    body["trace_id"] = trace_id
    assert check_report(body)["trace_id"] == trace_id
    for bad in ("0af7651916cd43dd8448eb211c80319", trace_id.upper(), "0" * 32, 1):
        body["trace_id"] = bad
        with pytest.raises(ReportError, match="trace_id"):
            check_report(body)
