"""dataplane.compat: the private names it reads exist with the shape we use, nothing
is installed at import, the version gate and the kill switch."""

import importlib
import importlib.metadata
import logging
import subprocess
import sys

import pytest
from quart_trio import QuartTrio

import dataplane.compat as compat
from dataplane.compat import hypercorn as compat_hypercorn
from dataplane.compat import quart_trio as compat_quart_trio


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


@pytest.mark.parametrize("dotted", [*compat_hypercorn.REACHES, *compat_quart_trio.REACHES])
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
import dataplane.app, dataplane.bff, telemetry.capcom
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


def test_kill_switch_names() -> None:
    assert compat.stock_names("") == frozenset()
    assert compat.stock_names("1") == frozenset(compat.SPEED)
    assert compat.stock_names("lean_send") == {"lean_send"}
    assert compat.stock_names(" keep_alive_timer , lean_send ") == {"keep_alive_timer", "lean_send"}


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
        assert compat.install_edge(app) == []
    assert hypercorn.protocol.H11Protocol is before  # type: ignore[attr-defined]
    assert app.request_class is stock_request
    gates = [r.getMessage() for r in caplog.records if "not a tested version" in r.getMessage()]
    assert len(gates) == 2 and "hypercorn 0.99.0" in gates[0]
    assert any("installed: none" in r.getMessage() for r in caplog.records)
