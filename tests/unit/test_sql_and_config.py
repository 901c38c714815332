"""Pure logic: the named-SQL loader and configuration parsing."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dataplane.config import Settings
from dataplane.errors import ConfigError
from dataplane.sql import parse_queries, q, queries, sql_root

ROOT = Path(__file__).resolve().parents[2]


def test_parse_queries_splits_on_name_headers() -> None:
    text = """
-- name: job_a
-- First statement.
SELECT 1;

-- name: job_b
-- Second.
SELECT 2
FROM x;
"""
    assert parse_queries(text) == {"job_a": "SELECT 1", "job_b": "SELECT 2\nFROM x"}


def test_parse_queries_rejects_duplicates_and_empties() -> None:
    with pytest.raises(ValueError, match="twice"):
        parse_queries("-- name: a\nSELECT 1;\n-- name: a\nSELECT 2;")
    with pytest.raises(ValueError, match="empty"):
        parse_queries("-- name: a\n-- only a description\n")


def test_every_statement_the_code_names_exists() -> None:
    used = set()
    for path in (ROOT / "dataplane").rglob("*.py"):
        used |= set(re.findall(r"\bq\(\"([a-z_]+)\"\)", path.read_text()))
    assert used, "the scan found no q(...) calls"
    missing = used - set(queries())
    assert not missing
    with pytest.raises(KeyError):
        q("no_such_statement")


def test_every_statement_has_a_description() -> None:
    for path in (sql_root() / "queries").glob("*.sql"):
        lines = path.read_text().splitlines()
        for i, line in enumerate(lines):
            if line.startswith("-- name:"):
                assert lines[i + 1].startswith("-- "), f"{path.name}: {line} lacks a description"


def test_settings_defaults() -> None:
    s = Settings.from_env({})
    assert s.queues_url is None and s.lease_seconds == 120 and s.renew_seconds == 60
    assert s.idle_ms == 2000 and s.concurrency == 8 and s.inline_max_bytes == 262144
    assert s.fail_backoff_seconds == 30 and s.max_dequeues == 5
    assert s.sse_deadline_seconds == 60 and s.sweep_seconds == 5 and not s.probe_enabled
    with pytest.raises(ConfigError, match="MAESTRO_QUEUES_URL"):
        s.require_queues_url()


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"MAESTRO_LEASE_SECONDS": "abc"}, "MAESTRO_LEASE_SECONDS must be a number"),
        ({"MAESTRO_LEASE_SECONDS": "-1"}, "MAESTRO_LEASE_SECONDS must be >="),
        ({"MAESTRO_LEASE_SECONDS": "10", "MAESTRO_RENEW_SECONDS": "20"}, "shorter than"),
        ({"DATAPLANE_CONCURRENCY": "0"}, "DATAPLANE_CONCURRENCY must be >= 1"),
        ({"DATAPLANE_IDLE_MS": "1.5"}, "DATAPLANE_IDLE_MS must be an integer"),
        ({"DATAPLANE_QUEUE_SUFFIX": "-prod"}, "DATAPLANE_QUEUE_SUFFIX"),
        ({"DATAPLANE_PROBE": "yes"}, "DATAPLANE_PROBE"),
    ],
)
def test_settings_name_the_bad_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        Settings.from_env(env)
