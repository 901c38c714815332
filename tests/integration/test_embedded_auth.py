"""The embedded server asks every connection for a password (scram-sha-256).

With trust on 127.0.0.1 and the socket, any local user connected as the superuser and
could run ``COPY (SELECT 1) TO PROGRAM 'id'`` as the server's user. The password is
generated at initdb and kept beside the data directory, mode 0600; a data directory an
older release made with trust is converted on its next start.
"""

from __future__ import annotations

import stat
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from dataplane.dev.embedded import FAST_SETTINGS, EmbeddedPostgres


def _without_password(dsn: str) -> str:
    params = conninfo_to_dict(dsn)
    params.pop("password", None)
    return make_conninfo(**params)  # type: ignore[arg-type]


def _refused(dsn: str) -> None:
    with pytest.raises(psycopg.OperationalError, match="password"):
        psycopg.connect(dsn, connect_timeout=5).close()


def test_no_connection_without_the_password(tmp_path: Path) -> None:
    server = EmbeddedPostgres(tmp_path / "data", settings=FAST_SETTINGS)
    server.start()
    try:
        mode = stat.S_IMODE(server.password_file.stat().st_mode)
        assert mode == 0o600, oct(mode)
        for tcp in (False, True):
            _refused(_without_password(server.dsn(tcp=tcp)))
            _refused(make_conninfo(server.dsn(tcp=tcp), password="wrong"))
            with psycopg.connect(server.dsn(tcp=tcp)) as conn:
                assert conn.execute("SELECT 1").fetchone() == (1,)
        # Kept across a restart: the same password opens it.
        server.stop()
        server.start()
        with psycopg.connect(server.dsn()) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
    finally:
        server.destroy()


def test_a_data_directory_made_with_trust_is_converted(tmp_path: Path) -> None:
    server = EmbeddedPostgres(tmp_path / "data", settings=FAST_SETTINGS)
    server.start()
    try:
        # As an older release left it: trust everywhere, no password kept.
        hba = server.datadir / "pg_hba.conf"
        hba.write_text(hba.read_text().replace("scram-sha-256", "trust"))
        server.password_file.unlink()
        server.stop()
        server.start()
        assert server.password() is not None
        _refused(_without_password(server.dsn(tcp=True)))
        _refused(_without_password(server.dsn()))
        with psycopg.connect(server.dsn(tcp=True)) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
    finally:
        server.destroy()
