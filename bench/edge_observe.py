"""Micro-benchmark: the CPU one request's observation costs at the HTTP edge.

Run from the repository root::

    python bench/edge_observe.py            # 20,000 requests a case
    python bench/edge_observe.py --quick

What one request pays in :mod:`dataplane.edge` besides the app: an
:class:`~dataplane.edge.Exchange` (the status seen on ``send``), its server span (a
stream's too) and its ``dataplane.access`` line — measured in this process, without
the network or the app, as CPU microseconds per request (``time.process_time``) for:

* ``bare``: the ASGI call through the edge's ``send`` wrappers with nothing exported
  (no tracer provider: the API's no-op span; access log off);
* ``access text`` / ``access json``: plus the access line in each format, written to
  ``/dev/null`` (a real ``StreamHandler``, ``trace_id``/``span_id`` added in JSON);
* ``span (SDK)``: plus the server span with the SDK's tracer provider and a
  ``BatchSpanProcessor`` whose exporter drops everything (what the OTLP exporter adds
  on its own thread is not counted), access log off;
* ``span + json``: both, as a BFF with ``OTEL_EXPORTER_OTLP_ENDPOINT`` and
  ``DATAPLANE_LOG_FORMAT=json`` runs.

Each request is a ``GET /api/{surface}/q/{jobId}/stream`` answered 200 with one body
message. Prints a table and writes ``bench/results/edge_observe.json``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import argparse
import logging
import os
import time
from collections.abc import Sequence
from typing import Any

import trio
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from bench.harness.common import format_table, now_iso, output_arg, run_and_save
from dataplane import edge
from dataplane.observability.logs import LogConfig, configure_logging

ROUNDS = 5  # the best of these is reported (the machine is shared)


class DropAll(SpanExporter):
    def export(self, spans: Sequence[Any]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


SCOPE = {
    "type": "http",
    "method": "GET",
    "path": "/api/probe/q/0b5a2f0e-2d7c-4d6e-9a55-0c9d3f0e7a11/stream",
    "scheme": "http",
    "http_version": "1.1",
    "server": ("127.0.0.1", 8000),
    "client": ("127.0.0.1", 50000),
    "headers": [(b"host", b"127.0.0.1:8000"), (b"accept", b"text/event-stream")],
}


async def _app(traced: bool) -> None:
    exchange = edge.Exchange(SCOPE)
    send = edge.shield_final_send(exchange.observe(_sink))
    exchange.route = "/api/{surface}/q/{jobId}/stream"
    if traced:
        exchange.start_span()
    exchange.note(job_id="0b5a2f0e-2d7c-4d6e-9a55-0c9d3f0e7a11", client="acme", coalesced=False)
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"event: done\n\n", "more_body": False})
    exchange.finish()


async def _sink(message: dict[str, Any]) -> None:
    return None


async def _per_request_us(n: int, traced: bool) -> float:
    best = float("inf")
    for _ in range(ROUNDS):
        started = time.process_time()
        for _ in range(n):
            await _app(traced)
        best = min(best, (time.process_time() - started) / n * 1e6)
    return best


def run(n: int) -> dict[str, Any]:
    devnull = open(os.devnull, "w")  # the handler's stream for the run
    sys.stderr, real_stderr = devnull, sys.stderr
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(DropAll()))
    access = logging.getLogger("dataplane.access")
    cases: dict[str, float] = {}
    try:
        for name, log_format, sdk in (
            ("bare", None, False),
            ("access text", "text", False),
            ("access json", "json", False),
            ("span (SDK)", None, True),
            ("span + json", "json", True),
        ):
            configure_logging(LogConfig(format=log_format or "text"))
            access.setLevel(logging.INFO if log_format else logging.WARNING)
            if sdk and not isinstance(trace.get_tracer_provider(), TracerProvider):
                trace.set_tracer_provider(provider)  # the cases without it ran first
            cases[name] = trio.run(_per_request_us, n, sdk)
    finally:
        sys.stderr = real_stderr
        provider.shutdown()
    bare = cases["bare"]
    return {
        "at": now_iso(),
        "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]},
        "requests_per_case": n,
        "rounds": ROUNDS,
        "cpu_us_per_request": {k: round(v, 2) for k, v in cases.items()},
        "added_us_over_bare": {k: round(v - bare, 2) for k, v in cases.items()},
    }


def print_tables(result: dict[str, Any]) -> None:
    rows = [
        [name, us, result["added_us_over_bare"][name]]
        for name, us in result["cpu_us_per_request"].items()
    ]
    print(format_table(["case", "CPU us / request", "added us"], rows))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="2,000 requests a case")
    output_arg(parser, "edge_observe")
    args = parser.parse_args(argv)
    result = run_and_save(
        lambda: run(2000 if args.quick else 20_000), args.output, print_tables, "interrupted"
    )
    return 130 if result is None else 0


if __name__ == "__main__":
    sys.exit(main())
