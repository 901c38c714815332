"""The Grafana dashboards: every wallboard SQL query runs against a real queue DB
seeded with realistic rows (Grafana macros substituted, as a SELECT-only role) and
returns the columns its panel shows; every metric the metrics dashboard and the
alert rules name is one the OpenTelemetry Prometheus exporter really produces (a
real Prometheus runs them: tests/acceptance/test_prometheus.py); the provisioning
holds together."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from dataplane.db import Database

ROOT = Path(__file__).resolve().parents[2]
DASHBOARDS = ROOT / "dashboards"
WALLBOARD = DASHBOARDS / "json" / "wallboard.json"
METRICS = DASHBOARDS / "json" / "metrics.json"
DATASOURCES = DASHBOARDS / "provisioning" / "datasources" / "datasources.yaml"
PROVIDERS = DASHBOARDS / "provisioning" / "dashboards" / "dashboards.yaml"
README = DASHBOARDS / "README.md"

RUN_COLUMNS = [
    "job_id",
    "finished_at",
    "type",
    "operation",
    "outcome",
    "wall_ms",
    "cpu_ms",
    "queue_wait_ms",
    "cache",
    "coalesced",
    "dequeue_count",
    "worker_id",
    "trace_id",
]
# The columns each wallboard panel shows (a new panel must be added here).
EXPECTED_COLUMNS: dict[str, list[str]] = {
    "Queue now": ["ready", "backing_off", "running", "lease_lapsed", "oldest_ready_s"],
    "Poison now": ["poison"],
    "Finished in range": ["jobs", "failed", "poison_or_lost"],
    "Queue depth by type and status": [
        "type",
        "tier",
        "ready",
        "backing_off",
        "in_flight",
        "oldest_ready_s",
        "poison",
        "paused",
        "answers_per_minute",
        "wait_p95_ms",
        "exec_p95_ms",
        "cache_hit_ratio",
        "coalesced_ratio",
    ],
    "Poison jobs": [
        "job_id",
        "type",
        "operation",
        "client",
        "dequeue_count",
        "created_at",
        "parked_at",
        "last_error",
    ],
    "Queue wait p50 / p95": ["time", "p50", "p95"],
    "Throughput by outcome": ["time", "metric", "jobs_per_s"],
    "Wall, CPU and RSS per operation": [
        "type",
        "operation",
        "runs",
        "wall_p50_ms",
        "wall_p95_ms",
        "wall_max_ms",
        "cpu_p50_ms",
        "cpu_p95_ms",
        "rss_max_bytes",
        "queue_wait_p50_ms",
        "queue_wait_p95_ms",
    ],
    "Wall p95 by operation": ["time", "metric", "wall_p95_ms"],
    "CPU p95 by operation": ["time", "metric", "cpu_p95_ms"],
    "RSS by worker": ["time", "metric", "rss_bytes"],
    "Cache-hit and coalescing ratios": ["cache_hit_ratio", "coalesced_ratio"],
    "Cache-hit and coalescing ratios over time": ["time", "cache_hit_ratio", "coalesced_ratio"],
    "Slowest runs": RUN_COLUMNS,
    "Failed, poisoned and lost runs": RUN_COLUMNS,
}

ALL_TYPES = "'__all'"  # the variable's custom "All" value, inserted unquoted by Grafana
TIME_FILTER = r"\1 BETWEEN now() - interval '6 hours' AND now()"
# $__timeGroupAlias(col, $__interval) two ways: date_bin, and Grafana's own expansion.
TIME_GROUPS = {
    "date_bin": "date_bin(interval '5 minutes', \\1, timestamptz 'epoch') AS \"time\"",
    "grafana": 'floor(extract(epoch from \\1)/300)*300 AS "time"',
}


def render(sql: str, *, types: str = ALL_TYPES, time_group: str = "date_bin") -> str:
    """Substitute every Grafana macro and variable the dashboards use; fail on others."""
    out = re.sub(
        r"\$__timeGroupAlias\(\s*([a-z_][a-z0-9_.]*)\s*,\s*\$__interval\s*\)",
        TIME_GROUPS[time_group],
        sql,
    )
    out = re.sub(r"\$__timeFilter\(\s*([a-z_][a-z0-9_.]*)\s*\)", TIME_FILTER, out)
    out = out.replace("$__timeFrom()", "(now() - interval '6 hours')")
    out = out.replace("$__timeTo()", "now()")
    out = out.replace("$__interval_ms", "300000")
    out = out.replace("$__interval", "'5m'")
    out = re.sub(r"\$type\b|\$\{type(:sqlstring|:csv)?\}", types, out)
    assert "$" not in out, f"a macro or variable the test does not know:\n{out}"
    return out


def load(path: Path) -> dict[str, Any]:
    loaded = json.loads(path.read_text())
    assert isinstance(loaded, dict)
    return loaded


def sql_panels() -> list[dict[str, Any]]:
    return [p for p in load(WALLBOARD)["panels"] if p.get("targets")]


# -- seeding --------------------------------------------------------------------

SEED_QUEUE = """
INSERT INTO maestro_queues (
    type, status, dedupe_key, payload, result, last_error, locked_by, lease_expires_at,
    dequeue_count, max_dequeues, available_at, created_at, claimed_at, completed_at
)
SELECT v.type, v.status, v.type || ':' || v.n, jsonb_build_object(
           'surface', replace(v.type, 'surface-', ''), 'operation', v.op, 'version', 1,
           'params', jsonb_build_object('n', v.n),
           'auth', jsonb_build_object('client', 'acme', 'actorEmail', 'ops@acme.test',
                                      'staff', true, 'branches', jsonb_build_array('*'),
                                      'scopeKey', 'k1', 'userId', '1')),
       CASE WHEN v.status = 'done' THEN '{"data": {"ok": true}}'::jsonb END,
       v.last_error,
       CASE WHEN v.status IN ('in_progress', 'poison') THEN 'surface-x@host:1:abc' END,
       CASE WHEN v.status = 'in_progress' THEN now() + v.lease END,
       v.dequeues, 5, now() + v.available, now() - v.age,
       CASE WHEN v.status <> 'pending' OR v.dequeues > 0 THEN now() - v.age + interval '1 ms' END,
       CASE WHEN v.status IN ('done', 'poison') THEN now() - v.done_ago END
FROM (VALUES
    -- type, n, status, op, dequeues, available (from now), age, lease, done_ago, last_error
    ('surface-probe', 1, 'pending', 'echo', 0, interval '-3 s', interval '3 s', NULL::interval,
     NULL::interval, NULL),
    ('surface-probe', 2, 'pending', 'fail', 1, interval '25 s', interval '10 s', NULL, NULL,
     'ProbeFailure: probe.fail: attempt 1 of 9'),
    ('surface-probe', 3, 'in_progress', 'sleep', 1, interval '100 s', interval '20 s',
     interval '100 s', NULL, NULL),
    ('surface-probe', 4, 'in_progress', 'sleep', 2, interval '-5 s', interval '300 s',
     interval '-5 s', NULL, NULL),
    ('surface-probe', 5, 'done', 'echo', 1, interval '-1 min', interval '1 min', NULL,
     interval '1 min', NULL),
    ('surface-probe', 6, 'done', 'echo', 1, interval '-2 h', interval '2 h', NULL,
     interval '2 h', NULL),
    ('surface-probe', 7, 'poison', 'fail', 5, interval '-1 h', interval '3 h', NULL,
     interval '1 h', E'Traceback (most recent call last):\n  File "x.py", line 1\n'
                     'ProbeFailure: probe.fail: attempt 5 of 9\n'),
    ('surface-probe', 8, 'poison', 'fail', 5, interval '-3 d', interval '3 d', NULL,
     interval '3 d', 'lease lapsed at the dequeue cutoff'),
    ('surface-users', 1, 'pending', 'list', 0, interval '-1 s', interval '1 s', NULL, NULL, NULL),
    ('surface-users', 2, 'done', 'list', 1, interval '-2 min', interval '2 min', NULL,
     interval '2 min', NULL),
    ('surface-users', 3, 'poison', 'detail', 5, interval '-10 min', interval '1 h', NULL,
     interval '10 min', E'RuntimeError: boom\n')
) AS v(type, n, status, op, dequeues, available, age, lease, done_ago, last_error)
"""

SEED_RUNS = """
INSERT INTO worker_runs (
    job_id, type, operation, outcome, wall_ms, cpu_ms, rss_bytes, queue_wait_ms, cache,
    coalesced, dequeue_count, worker_id, finished_at
)
SELECT gen_random_uuid(),
       (ARRAY['surface-probe', 'surface-users'])[1 + i %% 2],
       (ARRAY['echo', 'sleep', 'list'])[1 + i %% 3],
       (ARRAY['done', 'done', 'done', 'done', 'done', 'done', 'error', 'failed', 'poison',
              'lost', 'released'])[1 + i %% 11],
       0.5 + (i %% 97) * 1.7,
       0.2 + (i %% 13) * 0.4,
       60000000 + (i %% 7) * 1048576,
       0.3 + (i %% 29) * 0.2,
       (ARRAY['hit', 'miss', 'bypass', 'bypass'])[1 + i %% 4],
       i %% 5 = 0,
       1 + i %% 3,
       'surface-' || (ARRAY['probe', 'users'])[1 + i %% 2] || '@host-' || (i %% 3) || ':1:abc',
       now() - i * interval '10 seconds'
FROM generate_series(1, %(n)s) AS i
"""
RUNS_IN_RANGE = 2000  # every 10 s over the last 5.6 hours


@pytest.fixture
async def seeded(db: Database) -> Database:
    await db.execute(SEED_QUEUE)
    await db.execute(SEED_RUNS, {"n": RUNS_IN_RANGE})
    # Older than the 6 h range: must not count.
    await db.execute(
        SEED_RUNS.replace("now() - i *", "now() - interval '7 hours' - i *"), {"n": 50}
    )
    return db


@pytest.fixture
async def wallboard_role(seeded: Database) -> AsyncIterator[str]:
    """A member of dataplane_viewer and nothing else (the README's grant): no column of
    the envelope or the error text but through the views made for the wallboard."""
    role = f"wallboard_{uuid.uuid4().hex[:8]}"
    await seeded.execute(f"CREATE ROLE {role} NOLOGIN IN ROLE dataplane_viewer")
    yield role
    await seeded.execute(f"DROP ROLE {role}")


async def run_as(db: Database, role: str, sql: str) -> tuple[list[str], list[dict[str, Any]]]:
    """Run ``sql`` read-only as ``role``; returns (column names, rows)."""

    async def go(conn: Any) -> tuple[list[str], list[dict[str, Any]]]:
        async with conn.transaction(force_rollback=True):
            await conn.execute("SET TRANSACTION READ ONLY")
            await conn.execute(f"SET LOCAL ROLE {role}")
            cur = await conn.execute(sql)
            names = [column.name for column in cur.description]
            return names, await cur.fetchall()

    return await db.run(go)


# -- the wallboard's SQL ----------------------------------------------------------


def test_every_wallboard_panel_is_known_to_this_test() -> None:
    titles = [p["title"] for p in sql_panels()]
    assert len(titles) == len(set(titles)), "panel titles must be unique"
    assert sorted(titles) == sorted(EXPECTED_COLUMNS)


@pytest.mark.parametrize("time_group", sorted(TIME_GROUPS))
async def test_every_wallboard_query_runs_and_returns_its_columns(
    seeded: Database, wallboard_role: str, time_group: str
) -> None:
    for panel in sql_panels():
        title = panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "queue-db", title
            assert target["rawQuery"] is True and target["editorMode"] == "code", title
            for types in (ALL_TYPES, "'surface-probe','surface-users'", "'surface-users'"):
                sql = render(target["rawSql"], types=types, time_group=time_group)
                try:
                    columns, rows = await run_as(seeded, wallboard_role, sql)
                except Exception as exc:
                    raise AssertionError(f"{title!r} failed: {exc}\n{sql}") from exc
                assert columns == EXPECTED_COLUMNS[title], title
                assert rows, f"{title!r} returned no rows on the seeded DB ({types})"
                if target["format"] == "time_series":
                    assert columns[0] == "time", title
                    assert all(row["time"] is not None for row in rows), title
                for override in panel["fieldConfig"]["overrides"]:
                    if override["matcher"]["id"] == "byName":
                        assert override["matcher"]["options"] in columns, title


async def _panel(seeded: Database, role: str, title: str, types: str = ALL_TYPES) -> Any:
    (panel,) = [p for p in sql_panels() if p["title"] == title]
    return (await run_as(seeded, role, render(panel["targets"][0]["rawSql"], types=types)))[1]


async def test_the_wallboard_numbers_are_right(seeded: Database, wallboard_role: str) -> None:
    depth = {
        r["type"]: r for r in await _panel(seeded, wallboard_role, "Queue depth by type and status")
    }
    probe = depth["surface-probe"]
    assert (probe["ready"], probe["backing_off"], probe["in_flight"]) == (1, 1, 2)
    assert (probe["poison"], probe["paused"], probe["tier"]) == (2, False, "live")
    assert 2 <= probe["oldest_ready_s"] < 60
    assert (depth["surface-users"]["ready"], depth["surface-users"]["poison"]) == (1, 1)

    (now,) = await _panel(seeded, wallboard_role, "Queue now")
    assert (now["ready"], now["backing_off"], now["running"], now["lease_lapsed"]) == (2, 1, 1, 1)
    (only_users,) = await _panel(seeded, wallboard_role, "Queue now", "'surface-users'")
    assert only_users["ready"] == 1 and only_users["running"] == 0

    poison = await _panel(seeded, wallboard_role, "Poison jobs")
    assert [(p["type"], p["operation"]) for p in poison] == [
        ("surface-users", "detail"),
        ("surface-probe", "fail"),
        ("surface-probe", "fail"),
    ]
    assert [p["last_error"] for p in poison] == [
        "RuntimeError: boom",
        "ProbeFailure: probe.fail: attempt 5 of 9",
        "lease lapsed at the dequeue cutoff",
    ]
    assert all(uuid.UUID(p["job_id"]) and p["client"] == "acme" for p in poison)
    assert (await _panel(seeded, wallboard_role, "Poison now"))[0]["poison"] == 3

    (finished,) = await _panel(seeded, wallboard_role, "Finished in range")
    assert finished["jobs"] == RUNS_IN_RANGE  # the 7-hour-old rows are out of range
    assert 0 < finished["failed"] < finished["jobs"]

    (ratios,) = await _panel(seeded, wallboard_role, "Cache-hit and coalescing ratios")
    assert 0.45 < ratios["cache_hit_ratio"] < 0.55  # hit and miss alternate
    assert 0.15 < ratios["coalesced_ratio"] < 0.25  # one in five

    throughput = await _panel(seeded, wallboard_role, "Throughput by outcome")
    total = sum(float(r["jobs_per_s"]) * 300 for r in throughput)
    assert round(total) == RUNS_IN_RANGE
    assert {r["metric"] for r in throughput} == {
        "done",
        "error",
        "failed",
        "poison",
        "lost",
        "released",
    }

    per_op = await _panel(seeded, wallboard_role, "Wall, CPU and RSS per operation")
    assert sum(r["runs"] for r in per_op) == RUNS_IN_RANGE
    assert all(r["wall_p50_ms"] <= r["wall_p95_ms"] <= r["wall_max_ms"] for r in per_op)

    slow = await _panel(seeded, wallboard_role, "Slowest runs")
    assert len(slow) == 50 and slow[0]["wall_ms"] >= slow[-1]["wall_ms"]
    failed = await _panel(seeded, wallboard_role, "Failed, poisoned and lost runs")
    assert {r["outcome"] for r in failed} <= {"failed", "poison", "lost"}


MOMENTS = {"oldest_ready_s": 1.0, "answers_per_minute": 0.2}


async def test_the_card_panels_and_the_console_read_the_same_view(
    seeded: Database, wallboard_role: str
) -> None:
    """Issue #41: the wallboard's card panels and the console's overview never disagree:
    both select from dataplane_overview, and on the same rows show the same numbers."""
    from dataplane.console.reads import overview
    from dataplane.db import q

    assert "FROM dataplane_overview" in q("console_overview")
    for title in ("Queue depth by type and status", "Poison now"):
        (panel,) = [p for p in sql_panels() if p["title"] == title]
        assert "FROM dataplane_overview" in panel["targets"][0]["rawSql"], title
    await seeded.execute(
        "INSERT INTO maestro_paused (type, paused_by) VALUES ('surface-users', 't')"
    )
    rows = await _panel(seeded, wallboard_role, "Queue depth by type and status")
    cards = await overview(seeded)
    types = [r["type"] for r in rows]
    assert types == [c.type for c in cards] == ["surface-probe", "surface-users"]
    for row, card in zip(rows, cards, strict=True):
        for column, value in row.items():
            shown = getattr(card, column)
            if column in MOMENTS:  # read a moment apart: now() moved (one report at most)
                assert (shown is None) == (value is None), column
                assert value is None or abs(shown - value) <= MOMENTS[column], column
            else:
                assert shown == value, (card.type, column)
    assert rows[1]["paused"] and cards[1].paused
    (poison,) = await _panel(seeded, wallboard_role, "Poison now")
    assert poison["poison"] == sum(c.poison for c in cards) == 3


async def test_the_type_variable_query_lists_the_types(
    seeded: Database, wallboard_role: str
) -> None:
    (variable,) = load(WALLBOARD)["templating"]["list"]
    assert variable["name"] == "type" and variable["datasource"]["uid"] == "queue-db"
    assert variable["allValue"] == ALL_TYPES and variable["multi"] and variable["includeAll"]
    columns, rows = await run_as(seeded, wallboard_role, render(variable["query"]))
    assert columns == ["type"]
    assert [r["type"] for r in rows] == ["surface-probe", "surface-users"]


async def test_the_wallboard_answers_on_an_empty_database(db: Database) -> None:
    """A fresh install: no rows at all. Every query still runs (no empty IN list)."""
    for panel in sql_panels():
        for target in panel["targets"]:
            await db.fetchall(render(target["rawSql"]))


def test_trace_links_point_at_tempo_and_jaeger_by_job_id_and_trace_id() -> None:
    links = [
        (override["matcher"]["options"], link)
        for panel in sql_panels()
        for override in panel["fieldConfig"]["overrides"]
        for prop in override["properties"]
        if prop["id"] == "links"
        for link in prop["value"]
    ]
    # two per table with job ids, two per table of runs with trace ids
    assert sorted(column for column, _ in links) == ["job_id"] * 6 + ["trace_id"] * 4
    from urllib.parse import parse_qs, unquote, urlsplit

    for column, link in links:
        url = link["url"]
        assert url.startswith("/explore?") and "${__value.raw}" in url
        panes = json.loads(unquote(parse_qs(urlsplit(url).query)["panes"][0]))
        (pane,) = panes.values()
        (query,) = pane["queries"]
        if column == "trace_id":  # the trace itself, by its id
            assert pane["datasource"] in ("tempo", "jaeger")
            assert query["query"] == "${__value.raw}" and "tags" not in query
        elif pane["datasource"] == "tempo":
            assert query["query"] == '{ span.messaging.message.id = "${__value.raw}" }'
        else:
            assert pane["datasource"] == "jaeger"
            assert query["tags"] == "messaging.message.id=${__value.raw}"
            assert query["service"] == "dataplane-worker"


# -- the metrics dashboard ----------------------------------------------------------


@dataclass
class _Listener:
    connected: bool = True


@dataclass
class _Pool:
    def statistics(self) -> Any:
        return type("Stats", (), {"in_use": 1, "idle": 2, "waiting": 0})()


@dataclass
class _Pump:
    waiting: int = 3


@pytest.fixture
def exporter_text(monkeypatch: pytest.MonkeyPatch) -> str:
    """What the OpenTelemetry Prometheus exporter produces for every instrument of
    telemetry.metrics (one value recorded on each, every observed
    source present)."""
    from opentelemetry import metrics as otel_metrics
    from opentelemetry.exporter.prometheus import PrometheusMetricReader
    from opentelemetry.metrics import Counter, UpDownCounter
    from opentelemetry.sdk.metrics import MeterProvider
    from prometheus_client import REGISTRY, generate_latest

    from telemetry import metrics

    reader = PrometheusMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    listener, pool, pump = _Listener(), _Pool(), _Pump()
    try:
        monkeypatch.setattr(otel_metrics, "get_meter", provider.get_meter)
        instruments = metrics.Instruments()
        monkeypatch.setattr(metrics, "instruments", lambda: instruments)
        # Every counter with the label sets the processes start with ...
        metrics.initialise(
            "worker", {"surface-probe": ["echo"]}, cacheable=[("surface-probe", "echo")]
        )
        metrics.initialise("bff", {"surface-probe": ["echo"]})
        metrics.initialise("capcom")
        # ... and every histogram with the attributes its recorder gives it.
        queue = {metrics.QUEUE_TYPE: "surface-probe"}
        labels = {**queue, metrics.OPERATION: "echo"}
        failed = {**metrics.process_attributes("surface-probe", "echo"), "error.type": "E"}
        instruments.process_duration.record(0.001, failed)
        instruments.queue_wait.record(0.001, labels)
        instruments.queue_wait_since_enqueue.record(0.001, labels)
        instruments.end_to_end.record(0.001, {**queue, metrics.OUTCOME: "done"})
        http = {"http.request.method": "GET", "http.route": "/x", "http.response.status_code": 500}
        instruments.http_duration.record(0.001, {**http, "error.type": "500"})
        for instrument in vars(instruments).values():
            if isinstance(instrument, Counter | UpDownCounter):
                instrument.add(1)
        metrics.track_listener(listener, "test")
        metrics.track_pool(pool, "test")
        metrics.track_waiters(pump)
        metrics.publish_queue_sample(
            {("surface-probe", "ready"): 1}, {"surface-probe": 0.5}, valid_for=60
        )
        text: str = generate_latest(REGISTRY).decode()
    finally:
        metrics.withdraw_queue_sample()
        provider.shutdown()  # unregisters the reader's collector
    return text


OURS = r"\b(?:dataplane|messaging|http|db)_[a-z_]+\b"


@pytest.fixture
def exporter_names(exporter_text: str) -> set[str]:
    return {
        line.split("{")[0].split(" ")[0]
        for line in exporter_text.splitlines()
        if re.match(OURS, line)
    }


@pytest.fixture
def exporter_labels(exporter_text: str) -> set[str]:
    return set(re.findall(r"[{,]([a-z_]+)=", exporter_text))


HISTOGRAMS = [
    "messaging_process_duration_seconds",
    "http_server_request_duration_seconds",
    "dataplane_queue_wait_seconds",
    "dataplane_queue_wait_since_enqueue_seconds",
    "dataplane_end_to_end_seconds",
]
COUNTERS = [
    f"dataplane_{name}_total"
    for name in (
        "jobs",
        "cache_hits",
        "poison",
        "lease_lost",
        "jobs_rescued",
        "completion_fenced",
        "capcom_dropped",
        "capcom_received",
        "enqueued",
        "enqueue_refused",
        "coalesced",
        "cancelled",
        "stream_timeouts",
        "notify_rejected",
        "outsider_locks",
        "invalidations_refused",
        "result_invalid",
        "flow_deferred",
    )
]
GAUGES = [
    "dataplane_waiters",
    "dataplane_queue_depth",
    "dataplane_queue_oldest_ready_age_seconds",
    "dataplane_queue_paused",
    "dataplane_listen_connected",
    "dataplane_db_pool_connections",
    "db_client_connection_pending_requests",
]


def test_the_exporter_names_are_the_documented_ones(exporter_names: set[str]) -> None:
    histograms = {f"{name}_{part}" for name in HISTOGRAMS for part in ("bucket", "sum", "count")}
    assert exporter_names == histograms | set(COUNTERS) | set(GAUGES)
    readme = README.read_text()
    for name in HISTOGRAMS + COUNTERS + GAUGES:
        assert f"`{name}" in readme, name


def test_waiters_are_read_from_the_pump_when_collected(exporter_text: str) -> None:
    (line,) = [x for x in exporter_text.splitlines() if x.startswith("dataplane_waiters")]
    assert float(line.split()[-1]) == _Pump.waiting


def test_every_duration_is_in_seconds(exporter_text: str) -> None:
    """No millisecond histograms (promtool flags them; the conventions use seconds)."""
    assert "milliseconds" not in exporter_text
    assert all(h.endswith("_seconds") for h in HISTOGRAMS)


def _names_in(expr: str, labels: set[str]) -> set[str]:
    return set(re.findall(OURS, expr)) - labels


def test_every_metric_the_dashboard_names_is_exported(
    exporter_names: set[str], exporter_labels: set[str]
) -> None:
    dashboard = load(METRICS)
    used: set[str] = set()
    for panel in dashboard["panels"]:
        assert panel["datasource"]["uid"] == "prometheus", panel["title"]
        for target in panel["targets"]:
            names = _names_in(target["expr"], exporter_labels)
            assert names, f"{panel['title']}: no metric of ours in {target['expr']}"
            unknown = names - exporter_names
            assert not unknown, f"{panel['title']}: {sorted(unknown)} are not exported"
            assert target["expr"].count("(") == target["expr"].count(")"), target["expr"]
            used |= names
    # Every instrument has a panel.
    stems = {re.sub(r"_(bucket|sum|count)$", "", n) for n in exporter_names}
    assert stems <= {re.sub(r"_(bucket|sum|count)$", "", n) for n in used}


def test_every_metric_the_alert_rules_read_is_exported(
    exporter_names: set[str], exporter_labels: set[str]
) -> None:
    groups = yaml.safe_load((DASHBOARDS / "alerts.yaml").read_text())["groups"]
    rules = [rule for group in groups for rule in group["rules"]]
    assert {r["alert"] for r in rules} >= {
        "DataplaneBacklogAge",
        "DataplanePoison",
        "DataplaneNoConsumer",
        "DataplaneListenDown",
    }
    readme = README.read_text()
    for rule in rules:
        names = _names_in(rule["expr"], exporter_labels)
        assert names and names <= exporter_names, (rule["alert"], names - exporter_names)
        labels = set(re.findall(r"\b[a-z_]+(?==~|!=|=|!~)", rule["expr"])) | set(
            re.findall(r"\$labels\.([a-z_]+)", rule["annotations"]["summary"])
        )
        assert labels <= exporter_labels | {"job", "instance"}, (rule["alert"], labels)
        assert f"**{rule['alert']}**" in readme, f"README does not explain {rule['alert']}"


def test_every_metric_the_slo_rules_read_is_exported(
    exporter_names: set[str], exporter_labels: set[str]
) -> None:
    """dashboards/slo.yaml: each recording rule reads exported series and labels; each
    burn-rate alert reads a recording rule of the file and is explained in the README."""
    groups = yaml.safe_load((DASHBOARDS / "slo.yaml").read_text())["groups"]
    rules = [rule for group in groups for rule in group["rules"]]
    records = {r["record"] for r in rules if "record" in r}
    readme = README.read_text()
    for rule in rules:
        if "record" in rule:
            names = _names_in(rule["expr"], exporter_labels)
            assert names and names <= exporter_names, (rule["record"], names - exporter_names)
            labels = set(re.findall(r"\b[a-z_]+(?==~|!=|=|!~)", rule["expr"]))
            assert labels <= exporter_labels | {"le"}, (rule["record"], labels)
        else:
            read = set(re.findall(r"dataplane:[a-z_]+:[a-z0-9_]+", rule["expr"]))
            assert read and read <= records, (rule["alert"], read - records)
            assert f"**{rule['alert']}**" in readme, f"README does not explain {rule['alert']}"


# -- provisioning ---------------------------------------------------------------------


def test_provisioning_holds_together() -> None:
    datasources = yaml.safe_load(DATASOURCES.read_text())["datasources"]
    by_uid = {ds["uid"]: ds for ds in datasources}
    assert set(by_uid) == {"queue-db", "prometheus", "tempo", "jaeger"}
    assert by_uid["queue-db"]["type"] == "grafana-postgresql-datasource"
    providers = yaml.safe_load(PROVIDERS.read_text())["providers"]
    assert providers and all(p["type"] == "file" for p in providers)

    uids = set()
    for path in (WALLBOARD, METRICS):
        dashboard = load(path)
        uids.add(dashboard["uid"])
        ids = [p["id"] for p in dashboard["panels"]]
        assert len(ids) == len(set(ids)), path.name
        for panel in dashboard["panels"]:
            grid = panel["gridPos"]
            assert grid["x"] + grid["w"] <= 24 and grid["h"] > 0, panel["title"]
            refs = [panel["datasource"], *(t["datasource"] for t in panel["targets"])]
            for ref in refs:
                assert ref["uid"] in by_uid, panel["title"]
                assert ref["type"] == by_uid[ref["uid"]]["type"], panel["title"]
            assert panel.get("description"), f"{panel['title']}: say what it means"
    assert len(uids) == 2

    readme = README.read_text()
    text = re.sub(r"(^|\s)#.*$", "", DATASOURCES.read_text(), flags=re.MULTILINE)  # not comments
    variables = set(re.findall(r"\$\{([A-Z_][A-Z0-9_]*)\}", text))
    assert variables >= {"QUEUE_DB_HOST", "PROMETHEUS_URL", "TEMPO_URL", "JAEGER_URL"}
    undocumented = sorted(v for v in variables if f"`{v}`" not in readme)
    assert not undocumented, f"not described in dashboards/README.md: {undocumented}"
    for panel in sql_panels() + load(METRICS)["panels"]:
        assert f"**{panel['title']}**" in readme, f"README does not explain {panel['title']!r}"
