"""The rendered manifests, run for real with ``podman kube play`` against the session's
Postgres: the migration Job's pod migrates an empty database; two BFF pods and the
probe worker serve a real POST -> SSE ``done``; a worker SIGKILLed while it holds a
job leaves it to be re-driven by another; a rolling restart of the BFFs (one, then
the other, each drained by SIGTERM) loses no request of a steady client load.

:func:`kube_objects` is the one place that adapts the manifests to one host without a
kubelet; everything else in them (image, args, secret references, security context,
read-only root, the /tmp emptyDir, memory limits) is played as rendered.
"""

from __future__ import annotations

import base64
import copy
import json
import os
import subprocess
import tomllib
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psutil
import psycopg
import pytest
import trio
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from dataplane.deploy.render import render
from dataplane.deploy.yaml import dump_all
from dataplane.dev.embedded import free_port
from dataplane.surfaces import SurfacesConfig
from tests.conftest import wait_until
from tests.helpers import JWT_SECRET, NOTIFY_SECRET, bearer, read_sse, token

ROOT = Path(__file__).resolve().parents[2]
CONF = ROOT / "deploy" / "podman" / "containers.conf"
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
REPOSITORY = os.environ.get("IMAGE", "localhost/dataplane")  # as scripts/build-image names it
LEASE_SECONDS = 3  # a SIGKILLed worker's job is claimable again after this
READY_WITHIN = 60.0  # seconds a pod has to answer /readyz


def podman(*args: str, check: bool = True, timeout: float = 120) -> str:
    env = {**os.environ, "CONTAINERS_CONF": str(CONF)}
    done = subprocess.run(
        ["podman", *args], env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    if check and done.returncode != 0:
        raise AssertionError(f"podman {' '.join(args)}: {done.returncode}\n{done.stderr}")
    return done.stdout


async def apodman(*args: str, check: bool = True) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "CONTAINERS_CONF": str(CONF)}
    done = await trio.run_process(
        ["podman", *args], env=env, capture_stdout=True, capture_stderr=True, check=False
    )
    if check and done.returncode != 0:
        raise AssertionError(f"podman {' '.join(args)}: {done.returncode}\n{done.stderr!r}")
    return done


@dataclass
class Fleet:
    run: str  # suffix of every name this fleet made
    dsn: str  # the queue DB, from the host
    bffs: dict[str, int]  # pod name -> port
    workers: dict[str, int]  # deployment name -> metrics port
    objects: dict[str, dict[str, Any]]  # name -> the played object (not yet played: workers)
    directory: Path  # where the played YAML is kept (for a failure's post-mortem)

    def play(self, name: str) -> None:
        _play(self.objects[name], self.directory)

    def pod(self, deployment: str) -> str:
        return f"{deployment}-pod-0"  # podman kube play's name for a Deployment's pod


LOGINS = ("bff", "worker", "capcom", "scaler")  # each a login of its group role


def _secrets(run: str, dsn: str, logins: dict[str, str]) -> dict[str, dict[str, str]]:
    """What the rendered manifests reference (Secret name -> keys), for this fleet: the
    migration Job the owner's DSN (the test's superuser), each process its own login."""
    return {
        f"dataplane-queue-db-owner-{run}": {"url": dsn},
        **{f"dataplane-queue-db-{k}-{run}": {"url": v} for k, v in logins.items()},
        f"dataplane-client-db-{run}": {"url": dsn},  # probe reads no client DB
        f"dataplane-bff-{run}": {
            "jwt-secret": JWT_SECRET,
            "jwt-public-key": "",
            "stream-secret": "fleet-stream-secret-of-at-least-32-chars",
        },
        f"dataplane-metrics-{run}": {"token": "fleet-metrics-token-of-32-characters"},
        f"dataplane-shared-{run}": {"notify-secret": NOTIFY_SECRET, "capcom-token": ""},
    }


def _adapt(pod: dict[str, Any], run: str, env: dict[str, str]) -> None:
    """One host, no kubelet: host networking (the ports come from ``env``), no probes,
    preStop or spreading (the test waits on /readyz itself), the run's secret names."""
    spec = pod["spec"]
    spec["hostNetwork"] = True
    spec.pop("topologySpreadConstraints", None)
    for c in spec["containers"]:
        for key in ("readinessProbe", "livenessProbe", "lifecycle", "ports"):
            c.pop(key, None)
        kept = [e for e in c["env"] if e["name"] not in env and e["name"] != "DATAPLANE_CAPCOM_URL"]
        for e in kept:
            ref = e.get("valueFrom", {}).get("secretKeyRef")
            if ref:
                ref["name"] = f"{ref['name']}-{run}"
                ref.pop("optional", None)
        c["env"] = kept + [{"name": k, "value": v} for k, v in env.items()]


def kube_objects(run: str, image: str, bff_ports: list[int], worker_ports: list[int]) -> dict:
    """The rendered base (with the probe surface) as podman plays it on this host:
    the migration Job as a Pod; the BFF Deployment twice (a, b: two pods to roll);
    the probe worker Deployment twice (a plays first, b after a is killed)."""
    surfaces = SurfacesConfig(probe_enabled=True).registry().surfaces
    rendered = [o for objs in render(surfaces, image=image, version=VERSION).values() for o in objs]
    by_name = {(o["kind"], o["metadata"]["name"]): o for o in rendered}
    common = {"DATAPLANE_PROBE": "1", "DATAPLANE_LOG_FORMAT": "text"}
    job = by_name[("Job", f"dataplane-migrate-{VERSION.replace('.', '-')}")]
    migrate = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"dataplane-migrate-{run}", "labels": job["metadata"]["labels"]},
        "spec": copy.deepcopy(job["spec"]["template"]["spec"]),
    }
    _adapt(migrate, run, {})
    played = {migrate["metadata"]["name"]: migrate}
    for role, source, ports, extra in (
        ("bff", "dataplane-bff", bff_ports, "DATAPLANE_BIND"),
        ("worker", "dataplane-worker-probe", worker_ports, "DATAPLANE_METRICS_PORT"),
    ):
        for letter, port in zip("ab", ports, strict=True):
            obj = copy.deepcopy(by_name[("Deployment", source)])
            name = f"{source}-{letter}-{run}"
            obj["metadata"]["name"] = name
            obj["spec"]["replicas"] = 1
            env = {**common, extra: f"127.0.0.1:{port}" if role == "bff" else str(port)}
            if role == "worker":
                env |= {
                    "DATAPLANE_METRICS_HOST": "127.0.0.1",
                    "MAESTRO_LEASE_SECONDS": str(LEASE_SECONDS),
                    "MAESTRO_RENEW_SECONDS": "1",
                    "DATAPLANE_IDLE_MS": "200",
                }
            _adapt(obj["spec"]["template"], run, env)
            played[name] = obj
    return played


def _play(obj: dict[str, Any], directory: Path) -> None:
    path = directory / f"{obj['metadata']['name']}.yaml"
    path.write_text(dump_all([obj]))
    podman("kube", "play", str(path))


async def wait_ready(port: int, within: float = READY_WITHIN) -> None:
    async with httpx.AsyncClient(timeout=2) as http:

        async def ready() -> bool:
            try:
                return (await http.get(f"http://127.0.0.1:{port}/readyz")).status_code == 200
            except httpx.TransportError:
                return False

        await wait_until(ready, within=within, interval=0.1)


async def wait_any_ready(ports: list[int], within: float = READY_WITHIN) -> None:
    async with httpx.AsyncClient(timeout=2) as http:

        async def ready() -> bool:
            for port in ports:
                try:
                    if (await http.get(f"http://127.0.0.1:{port}/readyz")).status_code == 200:
                        return True
                except httpx.TransportError:
                    pass
            return False

        await wait_until(ready, within=within, interval=0.1)


def _tcp_dsn(admin_dsn: str, dbname: str) -> str:
    """The session server over TCP on loopback (containers share the host's network)."""
    params: dict[str, Any] = conninfo_to_dict(admin_dsn)
    if str(params.get("host", "")).startswith("/"):
        params["host"] = "127.0.0.1"
    params["dbname"] = dbname
    return make_conninfo(**params)


@pytest.fixture(scope="module")
def fleet(pg_admin_dsn: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    env = {**os.environ, "CONTAINERS_CONF": str(CONF)}
    subprocess.run([str(ROOT / "scripts" / "build-image")], env=env, check=True, timeout=900)
    run = uuid.uuid4().hex[:8]
    dbname = f"fleet_{run}"
    with psycopg.connect(pg_admin_dsn, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{dbname}"')  # empty: the Job migrates it
    dsn = _tcp_dsn(pg_admin_dsn, dbname)
    passwords = {kind: uuid.uuid4().hex for kind in LOGINS}
    with psycopg.connect(pg_admin_dsn, autocommit=True) as conn:
        for kind, password in passwords.items():  # members of their groups once migrated
            conn.execute(f"CREATE ROLE {kind}_{run} LOGIN PASSWORD '{password}'")  # type: ignore[arg-type]
    logins = {k: make_conninfo(dsn, user=f"{k}_{run}", password=p) for k, p in passwords.items()}
    secrets = _secrets(run, dsn, logins)
    objs = kube_objects(
        run,
        f"{REPOSITORY}-lms:{VERSION}",
        [free_port(), free_port()],
        [
            free_port(),
            free_port(),
        ],
    )
    fleet = Fleet(run, dsn, {}, {}, objs, tmp_path_factory.mktemp("kube"))
    try:
        for name, keys in secrets.items():
            encoded = {k: base64.b64encode(v.encode()).decode() for k, v in keys.items()}
            subprocess.run(
                ["podman", "secret", "create", name, "-"],
                input=json.dumps(encoded),  # podman 4.3 reads a JSON map of base64 values
                env=env, text=True, capture_output=True, check=True, timeout=30,
            )  # fmt: skip
        _migrate(fleet)  # it creates the group roles (sql/roles.sql)
        with psycopg.connect(pg_admin_dsn, autocommit=True) as conn:
            for kind in LOGINS:
                conn.execute(f"GRANT dataplane_{kind} TO {kind}_{run}")  # type: ignore[arg-type]
        for name, obj in objs.items():
            if obj["kind"] != "Deployment":
                continue
            port = _port(obj)
            if "bff" in name:
                fleet.bffs[fleet.pod(name)] = port
                fleet.play(name)
            elif "worker" in name:
                fleet.workers[name] = port
        fleet.play(next(n for n in fleet.workers if "-a-" in n))
        yield fleet
    finally:
        pods = podman("pod", "ps", "--format", "{{.Name}}", check=False).split()
        ours = [p for p in pods if p.endswith((run, f"{run}-pod-0"))]
        if ours:
            podman("pod", "rm", "-f", "-t", "0", *ours, check=False)
        for name in secrets:
            podman("secret", "rm", name, check=False)
        with psycopg.connect(pg_admin_dsn, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')
            for kind in LOGINS:
                conn.execute(f"DROP ROLE IF EXISTS {kind}_{run}")  # type: ignore[arg-type]


def _port(obj: dict[str, Any]) -> int:
    env = {
        e["name"]: e.get("value") for e in obj["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    value = env.get("DATAPLANE_BIND") or env.get("DATAPLANE_METRICS_PORT")
    return int(str(value).rsplit(":", 1)[-1])


def _migrate(fleet: Fleet) -> None:
    name = next(n for n in fleet.objects if "migrate" in n)
    fleet.play(name)
    container = f"{name}-migrate"
    code = podman("wait", container, timeout=120).strip()
    logs = podman("logs", container)
    assert code == "0", logs
    assert "applied 11 migration(s)" in logs or "applied" in logs, logs
    with psycopg.connect(fleet.dsn) as conn:
        row = conn.execute("SELECT maestro_queue_depth('surface-probe')").fetchone()
    assert row == (0,)
    # The played processes get no escape hatch: each serves as its own login.
    for obj in (o for o in fleet.objects.values() if o["kind"] == "Deployment"):
        env = {e["name"] for e in obj["spec"]["template"]["spec"]["containers"][0]["env"]}
        assert "DATAPLANE_ALLOW_OWNER" not in env


STAFF = token(staff=True, branches=["*"])


async def post_and_wait(http: httpx.AsyncClient, base: str, params: dict[str, Any]) -> Any:
    """POST to ``base``, follow the stream to its final event; return the done data."""
    resp = await http.post(
        f"{base}/api/probe/q", json={"operation": params.pop("op"), "params": params},
        headers=bearer(STAFF),
    )  # fmt: skip
    assert resp.status_code == 202, resp.text
    status, _, events = await read_sse(http, base + resp.json()["streamUrl"])
    assert status == 200 and events and events[-1].name == "done", events
    return events[-1].json


async def test_a_post_is_answered_over_sse_through_the_played_fleet(fleet: Fleet) -> None:
    for port in [*fleet.bffs.values(), fleet.workers[_worker(fleet, "a")]]:
        await wait_ready(port)
    async with httpx.AsyncClient(timeout=30) as http:
        for port in fleet.bffs.values():
            done = await post_and_wait(
                http, f"http://127.0.0.1:{port}", {"op": "echo", "value": f"hello {port}"}
            )
            assert done["status"] == "done"
            assert done["result"] == {"echo": f"hello {port}", "client": "acme"}
    container = f"{fleet.pod(_worker(fleet, 'a'))}-worker"
    ident = await apodman("exec", container, "id", "-u")
    assert ident.stdout.decode().strip() == "10001"
    write = await apodman("exec", container, "touch", "/opt/x", check=False)
    assert write.returncode != 0 and b"Read-only file system" in write.stderr


def _worker(fleet: Fleet, letter: str) -> str:
    return next(n for n in fleet.workers if f"-{letter}-" in n)


def _job(fleet: Fleet, job_id: str) -> tuple[str, int, str | None]:
    with psycopg.connect(fleet.dsn) as conn:
        row = conn.execute(
            "SELECT status, dequeue_count, locked_by FROM maestro_queues WHERE id = %s", (job_id,)
        ).fetchone()
    assert row is not None
    return row[0], row[1], row[2]


def _worker_pid(container: str) -> int:
    """The host pid of the ``dataplane worker`` process (tini's child) in ``container``."""
    tini = int(podman("inspect", "--format", "{{.State.Pid}}", container).strip())
    children = psutil.Process(tini).children()
    assert len(children) == 1 and "worker" in children[0].cmdline(), children
    return int(children[0].pid)


async def test_a_worker_sigkilled_holding_a_job_leaves_it_redriven(fleet: Fleet) -> None:
    a = _worker(fleet, "a")
    await wait_ready(fleet.workers[a])
    base = f"http://127.0.0.1:{next(iter(fleet.bffs.values()))}"
    async with httpx.AsyncClient(timeout=60) as http:
        resp = await http.post(
            f"{base}/api/probe/q",
            json={"operation": "sleep", "params": {"ms": 2500}},
            headers=bearer(STAFF),
        )
        job_id = resp.json()["jobId"]
        await wait_until(lambda: _job(fleet, job_id)[0] == "in_progress", within=20)
        holder = _job(fleet, job_id)[2]
        os.kill(_worker_pid(f"{fleet.pod(a)}-worker"), 9)  # SIGKILL, mid-job
        fleet.play(_worker(fleet, "b"))
        status, _, events = await read_sse(http, base + resp.json()["streamUrl"])
    assert status == 200 and events[-1].name == "done", events
    assert events[-1].json["result"] == {"slept_ms": 2500}
    final, attempts, last_holder = _job(fleet, job_id)
    assert final == "done" and attempts == 2, (final, attempts)
    assert last_holder != holder


@dataclass
class Load:
    """Clients that keep asking while the BFFs roll, as a proxy would route them: a
    request goes to a BFF that is up; one refused before its 202 goes to the other,
    and a stream cut by a stopping BFF is read again from the other (the stream URL's
    token is signed with the shared DATAPLANE_STREAM_SECRET)."""

    bases: list[str]
    issued: int = 0
    answered: int = 0
    rerouted: int = 0
    wrong: list[Any] | None = None

    async def one(self, http: httpx.AsyncClient, value: str, turn: int) -> None:
        self.issued += 1
        stream_url = None
        for attempt in range(20):
            base = self.bases[(turn + attempt) % len(self.bases)]
            try:
                if stream_url is None:
                    resp = await http.post(
                        f"{base}/api/probe/q",
                        json={"operation": "echo", "params": {"value": value}},
                        headers=bearer(STAFF),
                    )
                    assert resp.status_code == 202, resp.text
                    stream_url = resp.json()["streamUrl"]
                status, _, events = await read_sse(http, base + stream_url)
                if status == 200 and events and events[-1].name == "done":
                    if events[-1].json["result"]["echo"] != value:
                        (self.wrong or []).append(events[-1].json)
                    self.answered += 1
                    return
            except httpx.TransportError:
                pass
            self.rerouted += 1
            await trio.sleep(0.05)
        raise AssertionError(f"request {value} lost: no BFF answered it")

    async def client(self, number: int, stop: trio.Event) -> None:
        limits = httpx.Limits(max_keepalive_connections=0)  # a new connection per request
        async with httpx.AsyncClient(timeout=30, limits=limits) as http:
            turn = number
            while not stop.is_set():
                await self.one(http, f"c{number}-{turn}", turn)
                turn += 1


async def test_a_rolling_restart_of_the_bffs_loses_no_request(fleet: Fleet) -> None:
    for port in fleet.bffs.values():
        await wait_ready(port)
    await wait_any_ready(list(fleet.workers.values()))
    load = Load([f"http://127.0.0.1:{p}" for p in fleet.bffs.values()], wrong=[])
    stop = trio.Event()
    restarts: list[float] = []
    exits: list[str] = []  # each BFF's exit code after its SIGTERM
    async with trio.open_nursery() as nursery:
        for number in range(3):
            nursery.start_soon(load.client, number, stop)
        await trio.sleep(1)
        for pod, port in fleet.bffs.items():
            started = trio.current_time()
            await apodman("pod", "stop", "-t", "90", pod)  # SIGTERM: the BFF drains
            code = await apodman("inspect", "--format", "{{.State.ExitCode}}", f"{pod}-bff")
            exits.append(code.stdout.decode().strip())
            await apodman("pod", "start", pod)
            await wait_ready(port)
            restarts.append(trio.current_time() - started)
            await trio.sleep(1)
        stop.set()
    print(f"rolling restart: {load.issued} requests, {load.answered} answered, "
          f"{load.rerouted} rerouted, restarts {[f'{s:.1f}s' for s in restarts]}")  # fmt: skip
    assert load.answered == load.issued > 20
    assert load.wrong == []
    assert exits == ["0", "0"]  # drained and exited by itself, not killed after the grace
