"""dataplane.compat: the private names it reads exist with the shape we use, nothing
is installed at import, the version gate and the kill switch."""

import importlib
import importlib.metadata
import logging
import subprocess
import sys

import psycopg
import pytest
from quart_trio import QuartTrio

import dataplane.compat as compat
from dataplane.compat import hypercorn as compat_hypercorn
from dataplane.compat import opentelemetry as compat_otel
from dataplane.compat import psycopg as compat_psycopg
from dataplane.compat import quart_trio as compat_quart_trio
from dataplane.db import connection
from telemetry import metrics, otel, spans

MODULES = (compat_hypercorn, compat_quart_trio, compat_psycopg, compat_otel)


def _resolve(dotted: str) -> object:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            obj = getattr(obj, name)  # AttributeError: upstream changed shape
        return obj
    raise ImportError(dotted)


@pytest.mark.parametrize("dotted", [name for module in MODULES for name in module.REACHES])
def test_every_private_name_we_reach_exists(dotted: str) -> None:
    _resolve(dotted)


REACHED_SHAPES = """
import importlib, inspect
from hypercorn.protocol.h11 import H11Protocol
from hypercorn.trio.tcp_server import TCPServer, TrioSingleTask

assert list(inspect.signature(H11Protocol._send_h11_event).parameters) == ["self", "event"]
assert list(inspect.signature(TCPServer.protocol_send).parameters) == ["self", "event"]
assert list(inspect.signature(TrioSingleTask.restart).parameters) == [
    "self", "task_group", "action"
]
assert "send_lock" in inspect.getsource(TCPServer.__init__)
assert "_nursery" in inspect.getsource(importlib.import_module("hypercorn.trio.task_group"))
assert "_must_raise" in inspect.getsource(
    importlib.import_module("quart_trio.wrappers.request").TrioBody.__init__
)
assert "self._complete" in inspect.getsource(
    importlib.import_module("quart.wrappers.request").Body.__init__
)

# psycopg: the wait we override, the timeout we raise, the name we rebind
import psycopg, psycopg.errors, psycopg.waiting
assert list(inspect.signature(psycopg.AsyncConnection.wait).parameters) == [
    "self", "gen", "interval", "timeout"
]
assert "timeout" in inspect.signature(psycopg.AsyncConnection.cancel_safe).parameters
assert issubclass(psycopg.errors._WaitTimeout, Exception)
assert "get_running_loop" in inspect.getsource(psycopg.waiting.wait_async)

# trio-asyncio: its import replaces asyncio.get_running_loop (what psycopg must see);
# a loop's tasks run inside Trio, in this thread (the bridge's crossing wakes Trio
# tasks from them); current_loop is a context variable
import asyncio, contextvars
stock_get_running_loop = asyncio.get_running_loop
import trio, trio_asyncio
assert asyncio.get_running_loop is not stock_get_running_loop
assert isinstance(trio_asyncio.current_loop, contextvars.ContextVar)

async def main():
    async with trio_asyncio.open_loop() as loop:
        assert trio_asyncio.current_loop.get() is loop
        async def inside():
            return trio.lowlevel.current_task() is not None
        assert await trio_asyncio.run_aio_coroutine(loop.create_task(inside()))
trio.run(main)

# the OpenTelemetry SDK: ReadableSpan's keywords, the provider's fields, the exporter's
# client, Event's arguments
from opentelemetry.sdk.trace import Event, ReadableSpan, TracerProvider
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
keywords = set(inspect.signature(ReadableSpan.__init__).parameters)
assert {"name", "context", "parent", "resource", "attributes", "events", "links", "kind",
        "status", "start_time", "end_time", "instrumentation_scope"} <= keywords, keywords
assert list(inspect.signature(Event.__init__).parameters)[:4] == [
    "self", "name", "attributes", "timestamp"
]
provider = TracerProvider()
provider.sampler.should_sample, provider.id_generator.generate_span_id, provider.resource
exporter = OTLPSpanExporter(endpoint="http://127.0.0.1:9/v1/traces")
from opentelemetry.metrics._internal import _ProxyMeter
assert _ProxyMeter("x")._real_meter is None
assert callable(exporter._client.export) and exporter._shutdown is False
"""


def test_reached_shapes() -> None:
    """Upstream's own shapes, read in a fresh process: the suite's BFFs have installed
    the replacements in this one."""
    done = subprocess.run(
        [sys.executable, "-c", REACHED_SHAPES], env={"PATH": ""}, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr


IMPORT_INSTALLS_NOTHING = """
import hypercorn.protocol, hypercorn.trio.tcp_server as t, hypercorn.config
h11, task, send, logger = (hypercorn.protocol.H11Protocol, t.TrioSingleTask,
    t.TCPServer.protocol_send, hypercorn.config.Config.logger_class)
import dataplane.app, dataplane.bff, dataplane.capcom.app
assert hypercorn.protocol.H11Protocol is h11
assert t.TrioSingleTask is task and t.TCPServer.protocol_send is send
assert hypercorn.config.Config.logger_class is logger
from dataplane.compat import install_edge
install_edge(dataplane.app.quart_app)
assert hypercorn.protocol.H11Protocol is not h11
assert t.TrioSingleTask is not task and t.TCPServer.protocol_send is not send
assert hypercorn.config.Config.logger_class is not logger
"""


def test_importing_the_apps_installs_nothing() -> None:
    env = {"DATAPLANE_STOCK_STACK": "", "PATH": ""}
    done = subprocess.run(
        [sys.executable, "-c", IMPORT_INSTALLS_NOTHING], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr


WORKER_IMPORT_INSTALLS_NOTHING = """
import asyncio, psycopg, psycopg.waiting
stock_loop = psycopg.waiting.get_running_loop
import dataplane.worker.main, dataplane.cli
from dataplane.db import connection
from telemetry import metrics, otel, spans
assert psycopg.waiting.get_running_loop is stock_loop
assert connection.connection_class() is psycopg.AsyncConnection
assert spans._factory is None
assert otel._http_span_exporter is None and otel._resource_wrapper is None
from dataplane.compat import install_process
assert install_process() == ["running_loop", "lean_wait", "proxy_meter", "lean_spans",
                             "lean_otlp", "hashed_resource"]
assert psycopg.waiting.get_running_loop is asyncio.get_running_loop is not stock_loop
assert connection.connection_class() is not psycopg.AsyncConnection
assert spans._factory is not None and otel._http_span_exporter is not None
assert otel._resource_wrapper is not None
"""


def test_importing_the_workers_main_installs_nothing() -> None:
    """psycopg (imported first, so it holds asyncio's own get_running_loop),
    trio-asyncio and OpenTelemetry stay stock until the entry point installs."""
    env = {"DATAPLANE_STOCK_STACK": "", "PATH": ""}
    done = subprocess.run(
        [sys.executable, "-c", WORKER_IMPORT_INSTALLS_NOTHING],
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr


def test_the_kill_switch_leaves_every_process_replacement_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DATAPLANE_STOCK_STACK", "1")
    try:
        assert compat.install_process() == ["running_loop", "proxy_meter"]  # correctness
        assert connection.connection_class() is psycopg.AsyncConnection
        assert spans._factory is None and otel._http_span_exporter is None
        assert metrics._meter_delegate is compat_otel.proxy_delegate
        assert otel._resource_wrapper is None
        monkeypatch.setenv("DATAPLANE_STOCK_STACK", "lean_otlp")
        assert "lean_otlp" not in compat.install_process()
        assert otel._http_span_exporter is None and spans._factory is not None
    finally:
        monkeypatch.delenv("DATAPLANE_STOCK_STACK")
        compat.install_process()  # as the session installed it


def test_an_untested_psycopg_or_sdk_keeps_only_the_correctness_workaround(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    real = importlib.metadata.version
    monkeypatch.setattr(
        importlib.metadata,
        "version",
        lambda name: "9.9.0" if name in ("psycopg", "opentelemetry-sdk") else real(name),
    )
    try:
        with caplog.at_level(logging.INFO, logger="dataplane.compat"):
            assert compat.install_process() == ["running_loop"]
        assert connection.connection_class() is psycopg.AsyncConnection
        assert spans._factory is None and otel._http_span_exporter is None
        assert metrics._meter_delegate is metrics._as_is  # a proxy meter counts as on
        gates = [r.getMessage() for r in caplog.records if "not a tested version" in r.getMessage()]
        assert len(gates) == 2 and "psycopg 9.9.0" in gates[0]
    finally:
        monkeypatch.setattr(importlib.metadata, "version", real)
        compat.install_process()


def test_kill_switch_names() -> None:
    assert compat.stock_names("") == frozenset()
    assert compat.stock_names("1") == frozenset(compat.SPEED)
    assert compat.stock_names("lean_wait") == {"lean_wait"}
    assert compat.stock_names(" keep_alive_timer , lean_wait ") == {"keep_alive_timer", "lean_wait"}


def test_untested_version_installs_nothing_and_says_so(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    real = importlib.metadata.version
    monkeypatch.setattr(
        importlib.metadata,
        "version",
        lambda name: "0.99.0" if name in ("hypercorn", "quart-trio") else real(name),
    )
    import hypercorn.protocol

    before = hypercorn.protocol.H11Protocol  # type: ignore[attr-defined]
    app = QuartTrio(__name__)
    stock_request = app.request_class
    with caplog.at_level(logging.INFO, logger="dataplane.compat"):
        # Only what works around a defect through public API, or keeps connections safe.
        assert compat.install_edge(app) == ["shielded_final_send", "unmerged_slashes"]
    assert hypercorn.protocol.H11Protocol is before  # type: ignore[attr-defined]
    assert app.request_class is stock_request
    gates = [r.getMessage() for r in caplog.records if "not a tested version" in r.getMessage()]
    assert len(gates) == 2 and "hypercorn 0.99.0" in gates[0]
    assert app.url_map.merge_slashes is False
    assert any(
        "installed: shielded_final_send, unmerged_slashes; not installed: deferred_continue"
        in r.getMessage()
        for r in caplog.records
    )
