"""Pure logic: the named-SQL loader and configuration parsing."""

from __future__ import annotations

import difflib
import logging
import re
from pathlib import Path

import pytest

from dataplane.bff.config import BffConfig
from dataplane.core.errors import ConfigError
from dataplane.core.settings import env_names, from_env
from dataplane.db.sql import parse_queries, q, queries, sql_root
from dataplane.queue import QueueConfig, queue_database
from dataplane.worker.config import WorkerConfig, WorkerProcessConfig

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


WORKER_ENV = {"SURFACE_QUEUE_TYPE": "surface-probe"}


def test_settings_defaults() -> None:
    w = from_env(WorkerConfig, WORKER_ENV)
    b = from_env(BffConfig, {})
    assert b.queue.url is None and w.queue.lease_seconds == 120 and w.renew_seconds == 60
    assert w.idle_ms == 2000 and w.concurrency == 64 and w.inline_max_bytes == 262144
    assert w.queue_pool_size == 12  # not concurrency + 4: per-job statements queue for 8
    assert w.queue.fail_backoff_seconds == 30 and b.queue.max_dequeues == 5
    assert b.sse_deadline_seconds == 60 and b.sweep_seconds == 5
    assert not b.surfaces.probe_enabled
    with pytest.raises(ConfigError, match="MAESTRO_QUEUES_URL"):
        queue_database(from_env(QueueConfig, {}).url, "bff")
    named = queue_database("postgresql://u@h/q", "worker", pool_size=3)
    assert (named.application_name, named.pool_size) == ("dataplane-worker", 3)
    with pytest.raises(ConfigError, match="SURFACE_QUEUE_TYPE is not set"):
        from_env(WorkerConfig, {})


def test_settings_come_from_the_environment() -> None:
    env = {
        **WORKER_ENV,
        "MAESTRO_QUEUES_URL": "postgresql://q",
        "MAESTRO_LEASE_SECONDS": "90",
        "DATAPLANE_CONCURRENCY": "3",
        "DATAPLANE_PROBE": "1",
        "DATAPLANE_CAPCOM_URL": "http://capcom",
        "DATAPLANE_METRICS_PORT": "9464",
    }
    p = from_env(WorkerProcessConfig, env)
    assert p.worker.queue.url == "postgresql://q" and p.worker.queue.lease_seconds == 90
    assert p.worker.concurrency == 3 and p.surfaces.probe_enabled
    assert p.worker.queue_pool_size == 3 + 4
    assert p.capcom_url == "http://capcom" and p.metrics_port == 9464
    assert p.worker.worker_id.startswith("surface-probe@")


@pytest.mark.parametrize(
    ("cls", "env", "message"),
    [
        (QueueConfig, {"MAESTRO_LEASE_SECONDS": "abc"}, "MAESTRO_LEASE_SECONDS must be a number"),
        (QueueConfig, {"MAESTRO_LEASE_SECONDS": "-1"}, "MAESTRO_LEASE_SECONDS must be >="),
        (
            WorkerConfig,
            {**WORKER_ENV, "MAESTRO_LEASE_SECONDS": "10", "MAESTRO_RENEW_SECONDS": "20"},
            "MAESTRO_RENEW_SECONDS .* shorter than MAESTRO_LEASE_SECONDS",
        ),
        (
            WorkerConfig,
            {**WORKER_ENV, "DATAPLANE_CONCURRENCY": "0"},
            "DATAPLANE_CONCURRENCY must be >= 1",
        ),
        (WorkerConfig, {**WORKER_ENV, "DATAPLANE_IDLE_MS": "1.5"}, "DATAPLANE_IDLE_MS must be an"),
        (WorkerConfig, {"SURFACE_QUEUE_TYPE": "probe"}, "surface-<id>"),
        (BffConfig, {"DATAPLANE_QUEUE_SUFFIX": "-prod"}, "DATAPLANE_QUEUE_SUFFIX"),
        (BffConfig, {"DATAPLANE_PROBE": "yes"}, "DATAPLANE_PROBE"),
        (BffConfig, {"MAESTRO_LEASE_SECONDS": "abc"}, "MAESTRO_LEASE_SECONDS must be a number"),
    ],
)
def test_settings_name_the_bad_variable(cls: type, env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        from_env(cls, env)


def test_parse_queries_drops_indentation_unless_a_literal_spans_lines() -> None:
    text = "-- name: a\nSELECT x\n    FROM t\n    WHERE y = 'a  b';\n"
    assert parse_queries(text)["a"] == "SELECT x\nFROM t\nWHERE y = 'a  b'"
    multi = "-- name: a\nSELECT 'one\n    two' AS v;\n"
    assert parse_queries(multi)["a"] == "SELECT 'one\n    two' AS v"
    dollar = "-- name: a\nDO $$\n    BEGIN NULL; END\n$$;\n"
    assert parse_queries(dollar)["a"] == "DO $$\n    BEGIN NULL; END\n$$"


def test_hot_statements_fit_psycopgs_parse_cache() -> None:
    """A statement longer than psycopg's cache limit is parsed again at every run."""
    from psycopg import _queries

    limit = getattr(_queries, "MAX_CACHED_STATEMENT_LENGTH", 4096)
    hot = {n: len(b) for n, b in queries().items() if n.startswith(("job_", "lease_"))}
    assert "job_claim" in hot
    assert {n: size for n, size in hot.items() if size > limit} == {}


def test_the_claim_functions_constant_bound_is_the_largest_claim_batch() -> None:
    """maestro_claim reads its FIFO candidates under a constant bound (so its one plan
    is estimated for tens of rows); no claim the client allows may ask for more."""
    from dataplane.queue.client import MAX_CLAIM_BATCH

    for migration in (
        "0008_claim_function.sql",
        "0015_flow_control.sql",
        "0018_operator_actions.sql",
    ):
        text = (sql_root() / "migrations" / migration).read_text()
        body = text[text.index("AS $claim$") :]
        bounds = {int(n) for n in re.findall(r"LIMIT (\d+)", body)} - {1}  # LIMIT 1: a probe
        assert bounds == {MAX_CLAIM_BATCH}


def test_the_paused_claim_is_the_bounded_claim_but_for_its_pause_check() -> None:
    """0018 repeats 0015's maestro_claim to add one statement (CREATE OR REPLACE takes a
    whole body): nothing else of the claim may drift between the two."""

    def body(migration: str) -> list[str]:
        text = (sql_root() / "migrations" / migration).read_text()
        start = text.index("AS $claim$")
        return text[start : text.index("$claim$;", start)].splitlines()

    bounded, paused = body("0015_flow_control.sql"), body("0018_operator_actions.sql")
    changes = [
        (tag, bounded[i1:i2], paused[j1:j2])
        for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(a=bounded, b=paused).get_opcodes()
        if tag != "equal"
    ]
    assert [
        (tag, old, [line.split("--")[0].strip() for line in new]) for tag, old, new in changes
    ] == [
        (
            "insert",
            [],
            [
                "IF EXISTS (SELECT 1 FROM maestro_paused p WHERE p.type = p_type) THEN",
                "RETURN;",
                "END IF;",
            ],
        )
    ]


def test_an_old_setting_name_is_read_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    """Issue 39's prefix rule: DATAPLANE_* for every name of ours; the names they replace
    (CAPCOM_*, CLIENT_DB_URL) still work for one release, each warned about once."""
    from dataplane.capcom.app import CapcomSettings
    from dataplane.core import settings

    settings._warned.clear()
    caplog.set_level(logging.WARNING, logger="dataplane.core.settings")
    old = {"CAPCOM_TOKEN": "t-old", "CAPCOM_DB_URL": "dbname=old", "MAESTRO_QUEUES_URL": "q"}
    capcom = from_env(CapcomSettings, old)
    assert (capcom.token, capcom.db_url) == ("t-old", "dbname=old")  # before the fallback
    assert "CAPCOM_TOKEN is the old name of DATAPLANE_CAPCOM_TOKEN" in caplog.text
    new = {**old, "DATAPLANE_CAPCOM_TOKEN": "t-new", "DATAPLANE_CAPCOM_DB_URL": "dbname=new"}
    assert from_env(CapcomSettings, new).token == "t-new"
    assert from_env(CapcomSettings, new).db_url == "dbname=new"
    worker_env = {"CLIENT_DB_URL": "dbname=c", "CAPCOM_URL": "http://c"}
    worker_env["SURFACE_QUEUE_TYPE"] = "surface-probe"
    worker = from_env(WorkerProcessConfig, worker_env)
    assert (worker.client_db_url, worker.capcom_url) == ("dbname=c", "http://c")
    before = caplog.text.count("is the old name of")
    from_env(CapcomSettings, old)
    assert caplog.text.count("is the old name of") == before  # once per name and process
    names = {n for cls in (CapcomSettings, WorkerProcessConfig) for n in env_names(cls).values()}
    assert all(n.startswith(("DATAPLANE_", "MAESTRO_", "SURFACE_", "OTEL_")) for n in names)
