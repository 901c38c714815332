"""The HTTP edge's reading of a request for its server span (dataplane.http)."""

from __future__ import annotations

import pytest

from dataplane.http import _from_headers


@pytest.mark.parametrize(
    ("host", "server", "expected"),
    [
        (b"api.example:8443", ("10.0.0.1", 8000), ("api.example", 8443)),
        (b"api.example", ("10.0.0.1", 8000), ("api.example", 80)),
        (b"[::1]:8000", ("::1", 8000), ("[::1]", 8000)),
        (b"[::1]", ("::1", 8000), ("[::1]", 80)),
        (None, ("127.0.0.1", 8000), ("127.0.0.1", 8000)),
    ],
)
def test_server_address_and_port_come_from_host_else_the_socket(
    host: bytes | None, server: tuple[str, int], expected: tuple[str, int]
) -> None:
    headers = [(b"traceparent", b"00-" + b"1" * 32 + b"-" + b"2" * 16 + b"-01")]
    if host is not None:
        headers.append((b"host", host))
    scope = {"scheme": "http", "server": server, "headers": headers}
    address, port, traceparent = _from_headers(scope)
    assert (address, port) == expected
    assert traceparent is not None and traceparent.startswith("00-111")
