"""Cost of one span, in process: the SDK's tracer against the plane's lean tracer, and
the SDK's OTLP protobuf encoder against the plane's (``dataplane/observability``).

A span like the worker's ``process`` span (eight messaging and ``dataplane.*``
attributes) is created and ended ``--rounds`` times per sample, five samples, the
median kept:

* recorded -- ``start_span`` with explicit times, then ``end`` (statement and wait
  spans);
* live -- ``with start_as_current_span(...)`` (server, process and handler spans).

Ended spans go to a ``BatchSpanProcessor`` whose exporter discards them, so the
processor's queueing is in the figure and no export is. Encoding: 512 such spans
(one batch) through the SDK's ``encode_spans(...).SerializePartialToString()`` and
through :func:`dataplane.observability.otlp.encode_spans`, for spans of either tracer.
Prints a table and writes ``bench/results/span_cost.json``.

    python bench/span_cost.py [--rounds 5000]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import argparse
import json
import statistics
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans as sdk_encode
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from bench.harness.common import format_table, machine_info, now_iso, output_arg
from dataplane.observability import otel, otlp, spans

BATCH = 512


class _Discard(SpanExporter):
    def export(self, batch: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


def _attributes() -> dict[str, Any]:
    return {
        "messaging.system": "postgresql",
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
        "messaging.destination.name": "surface-probe",
        "messaging.message.id": str(uuid.uuid4()),
        "dataplane.attempt": 1,
        "dataplane.operation": "echo",
        "dataplane.surface": "probe",
    }


def _median_us(fn: Callable[[], None], rounds: int) -> float:
    fn()
    samples = []
    for _ in range(5):
        started = time.perf_counter()
        for _ in range(rounds):
            fn()
        samples.append((time.perf_counter() - started) / rounds * 1e6)
    return round(statistics.median(samples), 2)


def _span_costs(tracer: trace.Tracer, rounds: int) -> dict[str, float]:
    root = tracer.start_span("root")
    parent = trace.set_span_in_context(root)
    attrs = _attributes()

    def recorded() -> None:
        span = tracer.start_span(
            "job_claim", context=parent, kind=SpanKind.CLIENT, attributes=attrs, start_time=1
        )
        span.end(end_time=2)

    def live() -> None:
        with tracer.start_as_current_span("process", kind=SpanKind.CONSUMER, attributes=attrs):
            pass

    return {"recorded_us": _median_us(recorded, rounds), "live_us": _median_us(live, rounds)}


def _batch(make: Callable[[TracerProvider, Any], trace.Tracer]) -> Sequence[ReadableSpan]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=otel._resource("dataplane-worker", None))
    processor = SimpleSpanProcessor(exporter)
    provider.add_span_processor(processor)
    tracer = make(provider, processor)
    for _ in range(BATCH):
        with tracer.start_as_current_span(
            "process surface-probe", kind=SpanKind.CONSUMER, attributes=_attributes()
        ):
            pass
    return exporter.get_finished_spans()


def _encode_costs(batch: Sequence[ReadableSpan]) -> dict[str, float]:
    def sdk() -> None:
        sdk_encode(batch).SerializePartialToString()

    def plane() -> None:
        otlp.encode_spans(batch)

    return {
        "sdk_encoder_us": round(_median_us(sdk, 20) / len(batch), 2),
        "plane_encoder_us": round(_median_us(plane, 20) / len(batch), 2),
    }


def measure(rounds: int) -> dict[str, Any]:
    provider = TracerProvider()
    processor = BatchSpanProcessor(_Discard(), max_queue_size=4 * BATCH, schedule_delay_millis=50)
    provider.add_span_processor(processor)
    create = {
        "sdk": _span_costs(provider.get_tracer("dataplane"), rounds),
        "lean": _span_costs(spans.LeanTracer(provider, processor, "dataplane"), rounds),
    }
    provider.shutdown()
    encode: dict[str, dict[str, float]] = {}
    for name, make in (
        ("sdk spans", lambda p, _: p.get_tracer("dataplane")),
        ("lean spans", lambda p, proc: spans.LeanTracer(p, proc, "dataplane")),
    ):
        encode[name] = _encode_costs(_batch(make))
    return {
        "date": now_iso(),
        "machine": machine_info("-"),
        "config": {"rounds": rounds, "batch": BATCH, "attributes_per_span": len(_attributes())},
        "create_and_end_us": create,
        "encode_us_per_span": encode,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5000)
    output_arg(parser, "span_cost")
    args = parser.parse_args(argv)
    result = measure(args.rounds)
    c, e = result["create_and_end_us"], result["encode_us_per_span"]
    print(
        format_table(
            ["µs per span", "SDK", "plane"],
            [
                ["create + end, recorded", c["sdk"]["recorded_us"], c["lean"]["recorded_us"]],
                ["create + end, live (current)", c["sdk"]["live_us"], c["lean"]["live_us"]],
                [
                    "OTLP encode (SDK tracer's / lean spans)",
                    e["sdk spans"]["sdk_encoder_us"],
                    e["lean spans"]["plane_encoder_us"],
                ],
            ],
        )
    )
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
