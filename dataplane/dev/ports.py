"""The ports ``dataplane dev`` listens on: pinned by ``--base-port``, or free ones.

With ``--base-port N`` every listener is at a fixed offset from N (:data:`OFFSETS`):
the BFF on N, capcom on N+1, the console on N+2 (as ``dataplane bff``, ``capcom`` and
``console`` default to 8000, 8001, 8002), the embedded Postgres on N+3 and the workers'
metrics from N+10 on, one each in the order the banner's ``Running:`` line lists them.
Without it the BFF is on ``--port`` (8000) and the others on ports the kernel picks.

Every pinned port is checked before anything starts: one that is taken is refused
with one line naming it and what it was for (:class:`~dataplane.core.errors.ConfigError`),
rather than a child crash-looping on "address already in use". Importing this module
needs no embedded Postgres (the CLI's ``--help`` reads :data:`HELP`).
"""

from __future__ import annotations

import socket
from dataclasses import dataclass

from dataplane.core.errors import ConfigError

HOST = "127.0.0.1"
MAX_PORT = 65535
OFFSETS = {"bff": 0, "capcom": 1, "console": 2, "postgres": 3}
WORKERS_OFFSET = 10  # the i-th worker's metrics: N + 10 + i
WHAT = {
    "bff": "the BFF",
    "capcom": "capcom",
    "console": "the console",
    "postgres": "the embedded Postgres",
}
HELP = (
    "pin every port dev listens on to an offset from N: the BFF N, capcom N+1, the "
    "console N+2, the embedded Postgres N+3, the workers' metrics N+10, N+11, ... (in "
    "the order of the banner's Running: line); without it the BFF is on --port and "
    "the rest on free ports"
)


def free_port(avoid: frozenset[int] = frozenset()) -> int:
    """A port nobody listens on now (the kernel's pick), none of ``avoid``: the ports
    given to processes that have not bound them yet, which the kernel may pick again."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((HOST, 0))
            port: int = s.getsockname()[1]
        if port not in avoid:
            return port


@dataclass(frozen=True, slots=True)
class DevPorts:
    """Where each process of ``dataplane dev`` listens (``postgres`` 0: a free port)."""

    bff: int
    capcom: int
    console: int
    postgres: int = 0
    base: int | None = None

    def worker(self, index: int) -> int:
        """The metrics port of the ``index``-th worker started (from 0)."""
        if self.base is None:
            return free_port(frozenset({self.bff, self.capcom, self.console, self.postgres}))
        return self.base + WORKERS_OFFSET + index


def taken(port: int) -> bool:
    """Whether something listens on ``HOST:port`` (a socket in TIME_WAIT does not count:
    the servers bind with SO_REUSEADDR too)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((HOST, port))
        except OSError:
            return True
    return False


def dev_ports(*, port: int, base_port: int | None, workers: int, capcom: bool) -> DevPorts:
    """The ports of one run, every pinned one checked free; refused with one line."""
    if base_port is None:
        wanted = {port: "the BFF"}
        capcom_port = free_port(frozenset({port}))
        console = free_port(frozenset({port, capcom_port}))
        ports = DevPorts(bff=port, capcom=capcom_port, console=console)
    else:
        last = base_port + WORKERS_OFFSET + max(workers - 1, 0)
        if base_port < 1 or last > MAX_PORT:
            raise ConfigError(
                f"--base-port {base_port}: its ports run from {base_port} to {last}; "
                f"pick one from 1 to {MAX_PORT - WORKERS_OFFSET - max(workers - 1, 0)}"
            )
        names = [n for n in OFFSETS if capcom or n != "capcom"]
        wanted = {base_port + OFFSETS[n]: f"{WHAT[n]}, N+{OFFSETS[n]}" for n in names}
        for i in range(workers):
            wanted[base_port + WORKERS_OFFSET + i] = f"worker metrics, N+{WORKERS_OFFSET + i}"
        at = {n: base_port + offset for n, offset in OFFSETS.items()}
        ports = DevPorts(at["bff"], at["capcom"], at["console"], at["postgres"], base_port)
    busy = [f"{p} ({what})" for p, what in wanted.items() if taken(p)]
    if busy:
        again = "another --base-port" if base_port is not None else "another --port"
        raise ConfigError(
            f"port{'s' if len(busy) > 1 else ''} taken on {HOST}: {', '.join(busy)}; "
            f"stop what listens there or pick {again}"
        )
    return ports
