"""From an alert to a trace (issue 43, item 5), offline: files and libraries only.

Exemplars cannot do it here: the OpenTelemetry SDK keeps a histogram's exemplars (with
the trace id), but opentelemetry-exporter-prometheus drops them when it builds the
Prometheus families, so even an OpenMetrics exposition has none (the first test pins
that: when an upgrade makes it fail, exemplars have become possible). So the alerts
about slow or waiting jobs carry ``trace_url``, the console's ``/jobs/slowest``, which
redirects to the slowest recent done job's page, and that page links its trace
(tests/acceptance/test_console_slowest.py follows it on real processes).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
RULE_FILES = [ROOT / "dashboards" / "alerts.yaml", ROOT / "dashboards" / "slo.yaml"]
PROMETHEUS_CONFIGS = [ROOT / "deploy" / "compose" / "prometheus.yml"]
SLOWEST = "{{ $externalLabels.console_base }}/jobs/slowest?since=1h"
OF_TYPE = SLOWEST + "&type={{ $labels.messaging_destination_name }}"
TRACE_URLS = {
    "DataplaneLatencyBurnFast": SLOWEST,
    "DataplaneLatencyBurnSlow": SLOWEST,
    "DataplaneBacklogAge": OF_TYPE,
    "DataplaneStreamTimeouts": OF_TYPE,
}


def alerts() -> dict[str, dict[str, Any]]:
    out = {}
    for path in RULE_FILES:
        for group in yaml.safe_load(path.read_text())["groups"]:
            out |= {rule["alert"]: rule for rule in group["rules"] if "alert" in rule}
    return out


def test_the_prometheus_exporter_drops_the_sdk_s_exemplars() -> None:
    from opentelemetry.exporter.prometheus import PrometheusMetricReader
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from prometheus_client import CollectorRegistry
    from prometheus_client.openmetrics.exposition import generate_latest

    registry = CollectorRegistry()
    memory = InMemoryMetricReader()
    readers = [memory, PrometheusMetricReader(registry=registry)]
    meter = MeterProvider(metric_readers=readers).get_meter("t")
    histogram = meter.create_histogram("latency", unit="s")
    with TracerProvider().get_tracer("t").start_as_current_span("job") as span:
        histogram.record(3.2)
        trace_id = f"{span.get_span_context().trace_id:032x}"
    data = memory.get_metrics_data()
    assert data is not None
    (point,) = data.resource_metrics[0].scope_metrics[0].metrics[0].data.data_points
    assert [f"{e.trace_id:032x}" for e in point.exemplars] == [trace_id]  # the SDK has it
    exposition = generate_latest(registry).decode()  # OpenMetrics, which has exemplars
    assert "latency_seconds_bucket" in exposition
    assert trace_id not in exposition and " # {" not in exposition  # the exporter drops it


def test_the_alerts_about_slow_jobs_link_the_slowest_job() -> None:
    found = alerts()
    for name, url in TRACE_URLS.items():
        assert found[name]["annotations"].get("trace_url") == url, name
        if url == OF_TYPE:  # $labels are the expression's: it must keep the type
            assert "by (messaging_destination_name)" in found[name]["expr"], name
    others = {n for n, rule in found.items() if "trace_url" in rule["annotations"]}
    assert others == set(TRACE_URLS)


def test_every_external_label_the_annotations_use_is_set() -> None:
    used = set()
    for rule in alerts().values():
        for text in rule["annotations"].values():
            used |= set(re.findall(r"\$externalLabels\.([a-z_]+)", text))
    assert {"runbook_base", "console_base"} <= used
    for path in PROMETHEUS_CONFIGS:
        labels = yaml.safe_load(path.read_text())["global"]["external_labels"]
        assert used <= set(labels), (path, used - set(labels))


def test_compose_s_console_base_is_where_compose_publishes_the_console() -> None:
    config = yaml.safe_load(PROMETHEUS_CONFIGS[0].read_text())
    base = config["global"]["external_labels"]["console_base"]
    console = yaml.safe_load((ROOT / "compose.yaml").read_text())["services"]["console"]
    (published,) = console["ports"]
    listen = re.fullmatch(r"\$\{CONSOLE_LISTEN:-([0-9.]+:[0-9]+)\}:8002", published)
    assert listen is not None, published
    assert base == f"http://{listen.group(1)}"


def test_the_console_serves_the_link() -> None:
    from dataplane.console.app import create_app

    adapter = create_app().url_map.bind("console.local")
    assert adapter.match("/jobs/slowest", method="GET") == ("console.slowest", {})
