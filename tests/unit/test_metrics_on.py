"""metrics_on(): the worker skips building a job's metric attributes only when no
provider would record them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry import metrics as otel_metrics
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from dataplane.compat.opentelemetry import proxy_delegate
from telemetry import metrics


@pytest.fixture(autouse=True)
def fresh_instruments() -> Iterator[None]:
    metrics.instruments.cache_clear()
    yield
    metrics.instruments.cache_clear()


def test_a_no_op_meter_does_not_record(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(otel_metrics, "get_meter", lambda *a, **k: otel_metrics.NoOpMeter("x"))
    assert metrics.metrics_on() is False


def test_an_sdk_meter_records_and_so_does_the_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    monkeypatch.setattr(otel_metrics, "get_meter", provider.get_meter)
    try:
        assert metrics.metrics_on() is True
        metrics.instruments().jobs.add(1, {"k": "v"})
        data = reader.get_metrics_data()
        assert data is not None and data.resource_metrics  # it did record
    finally:
        provider.shutdown()


def test_a_proxy_meter_records_from_when_a_provider_is_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The API's proxy meter (no provider yet) drops values; once one is set it
    delegates: metrics_on() follows it without the instruments being made again."""
    from opentelemetry.metrics._internal import _ProxyMeter

    proxy = _ProxyMeter("dataplane")
    instruments = metrics.instruments()
    instruments._meter = proxy
    monkeypatch.setattr(metrics, "_meter_delegate", proxy_delegate)  # as compat installs
    assert metrics.metrics_on() is False
    proxy.on_set_meter_provider(MeterProvider())
    assert metrics.metrics_on() is True


def test_without_compat_a_proxy_meter_counts_as_recording(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from opentelemetry.metrics._internal import _ProxyMeter

    monkeypatch.setattr(metrics, "_meter_delegate", metrics._as_is)
    metrics.instruments()._meter = _ProxyMeter("dataplane")
    assert metrics.metrics_on() is True  # attributes built: nothing is lost
