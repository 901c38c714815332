"""Every alert fires end to end: real processes -> Prometheus -> Alertmanager -> a webhook.

One stack of real processes (a BFF, capcom, three workers, Debian's ``prometheus`` and
``prometheus-alertmanager``) and this test's own webhook receiver on loopback. The rules
of ``dashboards/alerts.yaml`` and ``dashboards/slo.yaml`` are copied with every ``for:``
cut to :data:`FOR` or :data:`FOR_OF` (the expressions untouched), Prometheus scrapes
and evaluates every second, Alertmanager sends each alert about a second after it
fires. Each incident is produced for real and every alert must reach the webhook with
its labels and its ``runbook_url``, within :data:`WITHIN` seconds of its incident (not
before it); the failure names the alert that never came and what Prometheus said of it.
The seconds from each incident to the webhook are printed (``pytest -s``) as a table.

The incidents, all started together at ``t0`` but the last two:

=========================  ==============================================================
poison burst               probe jobs failing their only attempt
backlog, workers stopped   the ``surface-probe-dev`` worker SIGSTOPped, jobs enqueued
                           (SIGCONT once the alert came: the backlog drains)
forged notifies            a read-only second role NOTIFYs garbage on a done channel
no consumer                a job of ``surface-ghost``, a type no worker serves
outsider lock              a connect-only role holds ``surface-users``' on-call lock
capcom down                capcom stopped while the probe worker reports jobs
client DB errors           the users worker's path to its client DB cut (a TCP proxy of
                           the test's), then its jobs enqueued
5xx storm                  a trigger on ``maestro_queues`` failing some enqueues (500)
slow answers               streams answered after 2.6 s (the SLO says 2.5 s)
stream timeouts            streams past the BFF's 3 s deadline
queue DB gone (then)       the BFF's path to the queue DB cut: 503s, LISTEN down
no worker at all (last)    every worker killed: nobody samples the queue
=========================  ==============================================================
"""

from __future__ import annotations

import dataclasses
import json
import signal
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
import trio
import yaml
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from dataplane.dev.embedded import free_port
from dataplane.queue import QueueClient, done_channel
from tests.conftest import admin_execute, connect_only_role, wait_until
from tests.console import TRACE_URL, console_env, viewer_token
from tests.helpers import (
    JWT_SECRET,
    NOTIFY_SECRET,
    BffProcess,
    WorkerProcess,
    bearer,
    envelope,
    read_sse,
    submit,
    token,
)
from tests.prom import ALERTS, SLO, Prometheus, alertmanager, prometheus, worker_env

FOR = "5s"  # every rule's `for:`, cut from minutes
# absent() holds from Prometheus' start until its first scrapes, which its service
# discovery hands over about 5 s in: a 5 s `for:` fires at every start.
FOR_OF = {"DataplaneQueueNotSampled": "10s"}
WITHIN = 90.0  # seconds an alert may take from its incident to the webhook
STACK_SECONDS = 240  # the incidents and the alerts, all told
RUNBOOK_BASE = "https://runbooks.example.test/dataplane"
# The console page each alert about slow or waiting jobs links (the slowest done job of
# the last hour, of the alert's type where it has one), under the console_base label.
TRACE_URLS = {
    "DataplaneBacklogAge": "/jobs/slowest?since=1h&type=surface-probe-dev",
    "DataplaneStreamTimeouts": "/jobs/slowest?since=1h&type=surface-probe",
    "DataplaneLatencyBurnFast": "/jobs/slowest?since=1h",
    "DataplaneLatencyBurnSlow": "/jobs/slowest?since=1h",
}
BACKLOG_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"  # the backlog jobs' trace
CAPCOM_TOKEN = "capcom-test-token-0123456789abcdef"
DEADLINE = 3  # the BFF's DATAPLANE_SSE_DEADLINE_SECONDS
SLOW_MS = 2600  # answered within the deadline, after the SLO's 2.5 s
TIMEOUT_MS = 4500  # past the deadline
TIMEOUTS = 40  # the rule wants more than one every 20 s over 10 minutes: 30
WORKERS = ("leader", "probe", "backlog")
BOOM = "boom-5xx"  # an enqueue whose payload holds this fails in the queue DB


# -- the rules, with short `for:` ---------------------------------------------------------


def fast_rules(tmp_path: Path) -> tuple[list[Path], dict[str, dict[str, Any]]]:
    """Copies of the rule files with every ``for:`` at :data:`FOR` (:data:`FOR_OF`
    for some); and the alert rules by name."""
    paths, rules = [], {}
    for source in (ALERTS, SLO):
        groups = yaml.safe_load(source.read_text())
        for group in groups["groups"]:
            for rule in group["rules"]:
                if "alert" in rule:
                    rules[rule["alert"]] = rule
                    if "for" in rule:
                        rule["for"] = FOR_OF.get(rule["alert"], FOR)
        path = tmp_path / source.name
        path.write_text(yaml.safe_dump(groups, sort_keys=False))
        paths.append(path)
    return paths, rules


# -- what the test owns: a webhook receiver and a TCP proxy it can cut --------------------


@dataclass
class Webhook:
    """Alertmanager's webhook receiver: an HTTP/1.1 server on loopback recording each
    alert POSTed (with the Trio clock's time it came)."""

    received: list[tuple[float, dict[str, Any]]] = field(default_factory=list)
    posts: int = 0

    async def serve(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        task_status.started(listeners[0].socket.getsockname()[1])
        await trio.serve_listeners(self._connection, listeners)

    async def _connection(self, stream: trio.SocketStream) -> None:
        buffer = b""
        async with stream:
            while True:
                while b"\r\n\r\n" not in buffer:
                    data = await stream.receive_some(65536)
                    if not data:
                        return
                    buffer += data
                head, _, buffer = buffer.partition(b"\r\n\r\n")
                headers = dict(
                    line.split(":", 1) for line in head.decode("latin-1").split("\r\n")[1:]
                )
                length = int(next(v for k, v in headers.items() if k.lower() == "content-length"))
                while len(buffer) < length:
                    data = await stream.receive_some(65536)
                    if not data:
                        return
                    buffer += data
                body, buffer = buffer[:length], buffer[length:]
                self.posts += 1
                now = trio.current_time()
                for alert in json.loads(body)["alerts"]:
                    self.received.append((now, alert))
                await stream.send_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")

    def first(
        self, name: str, labels: dict[str, str], since: float = float("-inf")
    ) -> tuple[float, dict[str, Any]] | None:
        """The first alert ``name`` carrying ``labels`` received at ``since`` or after."""
        for at, alert in self.received:
            got = alert["labels"]
            if (
                at >= since
                and got.get("alertname") == name
                and all(got.get(k) == v for k, v in labels.items())
            ):
                return at, alert
        return None


class Cuttable:
    """A TCP proxy on loopback to a Postgres server (its unix socket or TCP port);
    :meth:`cut` closes every connection through it and refuses new ones, as a network
    cut or a server gone would."""

    def __init__(self, dsn: str) -> None:
        params = conninfo_to_dict(dsn)
        self.dsn_through = dsn
        self.host, self.port_to = str(params.get("host", "127.0.0.1")), int(str(params["port"]))
        self.scope = trio.CancelScope()
        self.port = 0

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        with self.scope:
            listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
            self.port = listeners[0].socket.getsockname()[1]
            params = conninfo_to_dict(self.dsn_through)
            params.update(host="127.0.0.1", port=str(self.port))
            self.dsn_through = make_conninfo(**params)  # type: ignore[arg-type]
            task_status.started()
            await trio.serve_listeners(self._connection, listeners)

    def cut(self) -> None:
        self.scope.cancel()

    async def _connection(self, client: trio.SocketStream) -> None:
        try:
            if self.host.startswith("/"):
                server: trio.abc.Stream = await trio.open_unix_socket(
                    f"{self.host}/.s.PGSQL.{self.port_to}"
                )
            else:
                server = await trio.open_tcp_stream(self.host, self.port_to)
        except OSError:
            await client.aclose()
            return
        async with client, server, trio.open_nursery() as nursery:

            async def pump(src: trio.abc.Stream, dst: trio.abc.Stream) -> None:
                try:
                    while data := await src.receive_some(65536):
                        await dst.send_all(data)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    pass
                nursery.cancel_scope.cancel()

            nursery.start_soon(pump, client, server)
            nursery.start_soon(pump, server, client)


# -- the roles of the incidents ---------------------------------------------------------


@pytest.fixture
def second_role(queue_dsn: str, pg_admin_dsn: str) -> Iterator[str]:
    """The DSN of a LOGIN role that may connect to the queue DB, nothing more: it may
    NOTIFY and take advisory locks all the same."""
    with connect_only_role(queue_dsn, pg_admin_dsn) as dsn:
        yield dsn


FAILING_ENQUEUE = f"""
CREATE FUNCTION test_refuse_boom() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'the test refuses this enqueue';
END $$;
CREATE TRIGGER test_refuse_boom BEFORE INSERT ON maestro_queues FOR EACH ROW
    WHEN (NEW.payload::text LIKE '%{BOOM}%') EXECUTE FUNCTION test_refuse_boom();
"""


# -- the expectations -------------------------------------------------------------------


@dataclass(frozen=True)
class Expected:
    incident: str
    labels: dict[str, str]


def expectations(bff: str, leader: str) -> dict[str, Expected]:
    """Each alert: the incident that raises it and the labels it must carry (those
    of its expression's grouping; ``instance``: host:port as scraped)."""
    return {
        "DataplaneBacklogAge": Expected(
            "backlog", {"messaging_destination_name": "surface-probe-dev"}
        ),
        "DataplaneNoConsumer": Expected(
            "no consumer", {"messaging_destination_name": "surface-ghost"}
        ),
        "DataplaneQueueNotSampled": Expected("no worker", {}),
        "DataplanePoison": Expected(
            "poison",
            {"messaging_destination_name": "surface-probe", "dataplane_reason": "failed"},
        ),
        "DataplaneNotifyRejected": Expected(
            "forged notifies", {"job": "dataplane-bff", "instance": bff}
        ),
        "DataplaneOutsiderLock": Expected(
            "outsider lock", {"job": "dataplane-worker", "instance": leader}
        ),
        "DataplaneListenDown": Expected("queue DB gone", {"job": "dataplane-bff", "instance": bff}),
        "DataplaneStreamTimeouts": Expected(
            "stream timeouts", {"messaging_destination_name": "surface-probe"}
        ),
        "DataplaneHttp5xx": Expected("5xx storm", {"job": "dataplane-bff"}),
        "DataplaneHttp503": Expected("queue DB gone", {"job": "dataplane-bff"}),
        "DataplaneCapcomDrops": Expected(
            "capcom down", {"job": "dataplane-worker", "dataplane_reason": "refused"}
        ),
        "DataplaneClientDbErrors": Expected(
            "client DB errors", {"messaging_destination_name": "surface-users"}
        ),
        "DataplaneNoReadyWorker": Expected(
            "no consumer", {"messaging_destination_name": "surface-ghost"}
        ),
        "DataplaneAvailabilityBurnFast": Expected("5xx storm", {}),
        "DataplaneAvailabilityBurnSlow": Expected("5xx storm", {}),
        "DataplaneLatencyBurnFast": Expected("slow answers", {}),
        "DataplaneLatencyBurnSlow": Expected("slow answers", {}),
    }


# -- the test -----------------------------------------------------------------------------


async def test_every_alert_reaches_the_webhook(
    queue_dsn: str,
    queue: QueueClient,
    demo_db: tuple[str, str],
    second_role: str,
    tmp_path: Path,
) -> None:
    rule_paths, rules = fast_rules(tmp_path)
    webhook = Webhook()
    ports = {name: free_port() for name in ("bff", "capcom", "console", *WORKERS)}
    stack: dict[str, Any] = {}  # name -> BffProcess | WorkerProcess, as started
    started: dict[str, float] = {}

    def incident(name: str) -> None:
        started.setdefault(name, trio.current_time())

    async with trio.open_nursery() as nursery:
        queue_path, client_path = Cuttable(queue_dsn), Cuttable(demo_db[1])
        await nursery.start(queue_path.run)
        await nursery.start(client_path.run)
        hook_port = await nursery.start(webhook.serve)
        with psycopg.connect(second_role, autocommit=True) as outsider:
            try:
                # The outsider holds the users worker's on-call lock before it starts.
                outsider.execute(
                    "SELECT pg_advisory_lock(hashtext('dataplane.session_lock'),"
                    " hashtext('oncall:surface-users'))"
                )
                await _start_stack(stack, tmp_path, queue_dsn, queue_path, client_path, ports)
                targets = {
                    "dataplane-bff": [f"127.0.0.1:{ports['bff']}"],
                    "dataplane-capcom": [f"127.0.0.1:{ports['capcom']}"],
                    "dataplane-worker": [f"127.0.0.1:{ports[name]}" for name in WORKERS],
                }
                async with (
                    alertmanager(tmp_path, f"http://127.0.0.1:{hook_port}/") as am,
                    prometheus(
                        tmp_path,
                        targets,
                        rule_files=rule_paths,
                        external_labels={
                            "runbook_base": RUNBOOK_BASE,
                            "console_base": stack["console"].base,
                        },
                        alertmanager=am,
                    ) as prom,
                    httpx.AsyncClient(
                        timeout=30, limits=httpx.Limits(max_connections=None)
                    ) as http,
                ):
                    began = trio.current_time()
                    expected = expectations(
                        f"127.0.0.1:{ports['bff']}", f"127.0.0.1:{ports['leader']}"
                    )
                    assert sorted(expected) == sorted(rules), "an alert without an incident"

                    async def arrived(name: str) -> None:
                        await _wait_for_alerts(prom, webhook, {name: expected[name]}, started)

                    with trio.fail_after(STACK_SECONDS):
                        await _incidents(
                            prom, http, queue, queue_dsn, outsider, stack, queue_path,
                            client_path, arrived, incident,
                        )  # fmt: skip
                        await _wait_for_alerts(prom, webhook, expected, started)
                    _print_table(webhook, expected, started, trio.current_time() - began)
                    _check_alerts(webhook, expected, started, rules)
                    await _follow_trace_urls(http, webhook, expected, started, stack, queue)
            finally:
                for proc in stack.values():
                    if isinstance(proc, WorkerProcess) and proc.proc.poll() is None:
                        proc.signal(signal.SIGCONT)
                    proc.stop()
        nursery.cancel_scope.cancel()


async def _start_stack(
    stack: dict[str, Any],
    tmp_path: Path,
    queue_dsn: str,
    queue_path: Cuttable,
    client_path: Cuttable,
    ports: dict[str, int],
) -> None:
    """Into ``stack``, as each starts: capcom, the BFF (reaching the queue DB through
    ``queue_path``) and the :data:`WORKERS`: ``leader`` (``surface-users``, started
    first so it leads the fleet and samples the queue; its client DB through
    ``client_path``), ``probe`` (reporting to capcom) and ``backlog``
    (``surface-probe-dev``)."""
    capcom = BffProcess(
        {
            "DATAPLANE_CAPCOM_TOKEN": CAPCOM_TOKEN,
            "DATAPLANE_CAPCOM_DB_URL": queue_dsn,
            "DATAPLANE_METRICS": "1",
        },
        str(tmp_path / "capcom.log"),
        port=ports["capcom"],
        args=("-k", "trio"),
        app="dataplane.capcom.app:app",
    )
    bff = BffProcess(
        {
            "MAESTRO_QUEUES_URL": queue_path.dsn_through,
            "DATAPLANE_JWT_SECRET": JWT_SECRET,
            "DATAPLANE_NOTIFY_SECRET": NOTIFY_SECRET,
            "DATAPLANE_PROBE": "1",
            "DATAPLANE_METRICS": "1",
            "DATAPLANE_SWEEP_SECONDS": "1",
            "DATAPLANE_SSE_DEADLINE_SECONDS": str(DEADLINE),
        },
        str(tmp_path / "bff.log"),
        port=ports["bff"],
        args=("-k", "trio"),
    )
    console = BffProcess(  # the console the alerts' trace_url leads to
        console_env(queue_dsn),
        str(tmp_path / "console.log"),
        port=ports["console"],
        command=("-m", "dataplane", "console"),
    )
    stack.update(capcom=capcom, bff=bff, console=console)
    common = {"DATAPLANE_NOTIFY_SECRET": NOTIFY_SECRET, "DATAPLANE_CONCURRENCY": "64"}
    stack["leader"] = WorkerProcess(
        worker_env(
            queue_dsn,
            ports["leader"],
            SURFACE_QUEUE_TYPE="surface-users",
            DATAPLANE_CLIENT_DB_URL=client_path.dsn_through,
            **common,
        ),
        str(tmp_path / "worker-leader.log"),
    )
    await stack["leader"].wait_ready()
    await wait_until(lambda: "queue sampler: sampling" in stack["leader"].output(), within=30)
    stack["probe"] = WorkerProcess(
        worker_env(
            queue_dsn,
            ports["probe"],
            DATAPLANE_CAPCOM_URL=capcom.base,
            DATAPLANE_CAPCOM_TOKEN=CAPCOM_TOKEN,
            **common,
        ),
        str(tmp_path / "worker-probe.log"),
    )
    stack["backlog"] = WorkerProcess(
        worker_env(queue_dsn, ports["backlog"], SURFACE_QUEUE_TYPE="surface-probe-dev", **common),
        str(tmp_path / "worker-backlog.log"),
    )
    for name in ("probe", "backlog"):
        await stack[name].wait_ready()
    for proc in (bff, capcom, console):
        await proc.wait_ready()


async def _incidents(
    prom: Prometheus,
    http: httpx.AsyncClient,
    queue: QueueClient,
    queue_dsn: str,
    outsider: psycopg.Connection[Any],
    stack: dict[str, Any],
    queue_path: Cuttable,
    client_path: Cuttable,
    arrived: Callable[[str], Awaitable[None]],
    incident: Callable[[str], None],
) -> None:
    """Produce every incident (see the module's table); returns once the last began."""
    bff: BffProcess = stack["bff"]
    headers = bearer(token(staff=True))

    async def post(operation: str, params: dict[str, Any]) -> httpx.Response:
        return await http.post(
            f"{bff.base}/api/probe/q",
            json={"operation": operation, "params": params},
            headers=headers,
        )

    async def stream(operation: str, params: dict[str, Any]) -> str:
        resp = await post(operation, params)
        assert resp.status_code == 202, resp.text
        status, _, events = await read_sse(http, bff.base + resp.json()["streamUrl"])
        assert status == 200 and events, (status, events)
        return str(events[-1].json.get("code") or events[-1].name)

    # Before: every path works (a users job through the client DB, streams, capcom).
    baseline = await submit(queue, "users", "detail", {"userId": 1})
    await wait_until(lambda: _status(queue, baseline.job_id, "done"), within=30)
    for n in range(2):
        assert await stream("echo", {"value": n}) == "done"
    await prom.wait_for("sum(dataplane_capcom_received_total) >= 2")

    # t0: every incident but the last two.
    for name in (
        "poison", "backlog", "forged notifies", "no consumer", "outsider lock", "capcom down",
        "client DB errors", "5xx storm", "slow answers", "stream timeouts",
    ):  # fmt: skip
        incident(name)
    stack["backlog"].signal(signal.SIGSTOP)
    stack["capcom"].stop()
    client_path.cut()
    admin_execute(queue_dsn, FAILING_ENQUEUE)
    for n in range(3):
        await submit(queue, "probe", "fail", {"times": 5, "nonce": str(n)}, max_dequeues=1)
    backlog = []
    for n in range(3):  # in one trace, as a BFF with tracing on would have enqueued them
        env = envelope("probe", "echo", {"value": n})
        env = dataclasses.replace(env, traceparent=f"00-{BACKLOG_TRACE}-b7ad6b716920333{n}-01")
        backlog.append(await queue.enqueue("surface-probe-dev", env.dedupe_key, env.to_json()))
    await submit(queue, "ghost", "echo", {})
    for n in range(3):
        outsider.execute("SELECT pg_notify(%s, %s)", (done_channel("surface-probe"), f"forged {n}"))
    for n in range(20):
        await submit(queue, "users", "detail", {"userId": 100 + n})
    finals: dict[str, list[str]] = {"slow": [], "timeout": [], "boom": []}

    async def keep(kind: str, call: Awaitable[str]) -> None:
        finals[kind].append(await call)

    async def after(seconds: float, call: Awaitable[str]) -> str:
        # Spread out: a series born with a burst (a status code never answered
        # before, the first timeouts) starts at its total, and rate() sees no rise.
        await trio.sleep(seconds)
        return await call

    async def boom(n: int) -> str:
        return str((await post("echo", {"value": f"{BOOM}-{n}"})).status_code)

    async def reports() -> None:  # jobs the probe worker reports to a capcom that is gone
        for n in range(40):
            await submit(queue, "probe", "echo", {"value": f"report-{n}"})
            await trio.sleep(0.5)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(reports)
        for n in range(8):
            nursery.start_soon(keep, "slow", stream("sleep", {"ms": SLOW_MS + n}))
        for n in range(TIMEOUTS):
            timeout = stream("sleep", {"ms": TIMEOUT_MS + n})
            nursery.start_soon(keep, "timeout", after(0.2 * n, timeout))
        for n in range(30):
            nursery.start_soon(keep, "boom", after(0.2 * n, boom(n)))
    # A slow answer may miss the deadline on a loaded machine: most must not.
    assert finals["slow"].count("done") >= 6, finals
    assert finals["timeout"] == ["TIMEOUT"] * TIMEOUTS and finals["boom"] == ["500"] * 30, finals

    # The queue DB gone for the BFF: once the notifies it must hear were heard.
    await prom.wait_for("sum(dataplane_notify_rejected_total) >= 1")
    incident("queue DB gone")
    queue_path.cut()
    for _ in range(30):
        assert (await post("echo", {"value": "unreachable"})).status_code == 503
        await trio.sleep(0.2)

    # The backlog drains once its worker runs again; then no worker at all.
    await arrived("DataplaneBacklogAge")
    stack["backlog"].signal(signal.SIGCONT)
    for enq in backlog:
        await wait_until(lambda e=enq: _status(queue, e.job_id, "done"), within=30)
    incident("no worker")
    for name in WORKERS:
        stack[name].stop()


async def _status(queue: QueueClient, job_id: Any, status: str) -> bool:
    row = await queue.get(job_id)
    return row is not None and row.status == status


async def _wait_for_alerts(
    prom: Prometheus, webhook: Webhook, expected: dict[str, Expected], started: dict[str, float]
) -> None:
    """Every expected alert at the webhook, each within :data:`WITHIN` of its incident;
    else fail naming the missing ones and what Prometheus said of them."""
    missing = dict(expected)
    while missing:
        for name, want in list(missing.items()):
            if _arrival(webhook, name, want, started) is not None:
                del missing[name]
        late = [n for n in missing if trio.current_time() - started[expected[n].incident] > WITHIN]
        if late:
            alerts = (await prom.http.get(f"{prom.base}/api/v1/alerts")).json()["data"]["alerts"]
            said: dict[str, Any] = {
                n: [a for a in alerts if a["labels"]["alertname"] == n] for n in late
            }
            groups = (await prom.http.get(f"{prom.base}/api/v1/rules")).json()["data"]["groups"]
            for rule in (r for g in groups for r in g["rules"] if r["name"] in late):
                said[rule["name"]] = {
                    "alerts": said[rule["name"]],
                    "rule": {k: rule.get(k) for k in ("state", "health", "lastError", "query")},
                }
            got = sorted({a["labels"]["alertname"] for _, a in webhook.received})
            pytest.fail(
                "never reached the webhook: "
                + ", ".join(
                    f"{n} ({expected[n].incident}, labels {expected[n].labels}"
                    + (", only before it began" if webhook.first(n, expected[n].labels) else "")
                    + ")"
                    for n in late
                )
                + f"\nPrometheus /api/v1/alerts of them: {json.dumps(said, indent=1)}"
                + f"\nthe webhook got: {got}"
            )
        await trio.sleep(0.25)


def _arrival(
    webhook: Webhook, name: str, want: Expected, started: dict[str, float]
) -> tuple[float, dict[str, Any]] | None:
    """The first alert ``name`` with the labels wanted since its incident began."""
    return webhook.first(name, want.labels, started[want.incident])


def _check_alerts(
    webhook: Webhook,
    expected: dict[str, Expected],
    started: dict[str, float],
    rules: dict[str, dict[str, Any]],
) -> None:
    """Each alert carries its rule's severity, the incident's labels, its summary and
    its runbook (the ``runbook_base`` external label + ``/<alert>.md``)."""
    wrong = []
    for name, want in expected.items():
        found = _arrival(webhook, name, want, started)
        assert found is not None, name
        alert = found[1]
        assert alert["status"] == "firing", alert
        assert alert["labels"]["severity"] == rules[name]["labels"]["severity"], alert
        assert alert["annotations"]["summary"], alert
        runbook = alert["annotations"].get("runbook_url")
        if runbook != f"{RUNBOOK_BASE}/{name}.md":
            wrong.append(f"{name}: runbook_url {runbook!r}")
        trace = alert["annotations"].get("trace_url")
        if trace != (
            f"{alert['labels']['console_base']}{TRACE_URLS[name]}" if name in TRACE_URLS else None
        ):
            wrong.append(f"{name}: trace_url {trace!r}")
    assert not wrong, "wrong annotations (runbook_url: <runbook_base>/<alert>.md): " + ", ".join(
        wrong
    )


async def _follow_trace_urls(
    http: httpx.AsyncClient,
    webhook: Webhook,
    expected: dict[str, Expected],
    started: dict[str, float],
    stack: dict[str, Any],
    queue: QueueClient,
) -> None:
    """Each trace_url, opened by a console viewer, redirects to the page of a done job
    of the alert's type; the slowest of the hour is a backlog job, whose page links
    its trace."""
    headers = {**bearer(viewer_token()), "Accept": "text/html"}
    for name in TRACE_URLS:
        found = _arrival(webhook, name, expected[name], started)
        assert found is not None
        url = found[1]["annotations"]["trace_url"]
        resp = await http.get(url, headers=headers)
        assert resp.status_code == 303, (name, url, resp.status_code, resp.text)
        job_id = resp.headers["Location"].removeprefix("/jobs/")
        row = await queue.get(job_id)
        assert row is not None and row.status == "done", (name, url, row)
        want = expected[name].labels.get("messaging_destination_name")
        assert want is None or row.type == want, (name, url, row.type)
        if name != "DataplaneStreamTimeouts":  # the backlog's jobs waited longest
            assert row.type == "surface-probe-dev", (name, url, row.type)
            page = await http.get(stack["console"].base + resp.headers["Location"], headers=headers)
            link = 'href="' + TRACE_URL.format(trace_id=BACKLOG_TRACE) + '"'
            assert page.status_code == 200 and link in page.text, (name, url, page.text[:2000])


def _print_table(
    webhook: Webhook, expected: dict[str, Expected], started: dict[str, float], total: float
) -> None:
    rows = []
    for name, want in expected.items():
        found = _arrival(webhook, name, want, started)
        assert found is not None
        rows.append((name, want.incident, found[0] - started[want.incident]))
    width = max(len(n) for n in expected)
    print(f"\n{'alert':<{width}}  {'incident':<18}  seconds to webhook (for: {FOR}, {FOR_OF})")
    for name, what, seconds in rows:
        print(f"{name:<{width}}  {what:<18}  {seconds:6.1f}")
    print(f"{len(rows)} alerts, {webhook.posts} webhook POSTs, {total:.0f} s with Prometheus up")
    keys = ("messaging_destination_name", "dataplane_reason", "dataplane_listener", "job")
    also = sorted(
        {
            (a["labels"]["alertname"], *(a["labels"].get(k, "") for k in keys))
            for _, a in webhook.received
        }
        - {
            (n, *(found[1]["labels"].get(k, "") for k in keys))
            for n, w in expected.items()
            if (found := _arrival(webhook, n, w, started))
        }
    )
    print("also received (side effects of the incidents):")
    for row in also:
        print("  " + " ".join(part for part in row if part))
