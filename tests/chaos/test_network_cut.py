"""A worker's host cut off from Postgres mid-job, for real.

The worker runs in a network namespace of this test's own, joined to the host
by a veth pair; Postgres listens on the host end. Dropping the link strands the
worker mid-job: its lease lapses, a second worker re-drives the job and
completes it; when the link comes back, the stranded worker's late completion
reaches Postgres and is refused by the fence.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import trio

from dataplane.db import DatabaseConfig, open_bridge, open_database
from dataplane.dev.embedded import FAST_SETTINGS, EmbeddedPostgres
from dataplane.queue import QueueClient
from dataplane.queue.migrations import migrate
from tests.conftest import wait_until
from tests.helpers import WorkerProcess, submit

HOST_IP, NS_IP = "10.203.77.1", "10.203.77.2"  # a /30 that exists only between the two ends


def sh(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True, timeout=30)


@pytest.fixture
def netns() -> Iterator[tuple[str, str]]:
    """(namespace, host-side veth) — created here, removed after."""
    tag = uuid.uuid4().hex[:6]
    ns, host_if, ns_if = f"dpt-{tag}", f"dph{tag}", f"dpn{tag}"
    assert os.geteuid() == 0, "network namespaces need root (CI runs as root)"
    sh("ip", "netns", "add", ns)
    try:
        sh("ip", "link", "add", host_if, "type", "veth", "peer", "name", ns_if)
        sh("ip", "link", "set", ns_if, "netns", ns)
        sh("ip", "addr", "add", f"{HOST_IP}/30", "dev", host_if)
        sh("ip", "link", "set", host_if, "up")
        sh("ip", "netns", "exec", ns, "ip", "addr", "add", f"{NS_IP}/30", "dev", ns_if)
        sh("ip", "netns", "exec", ns, "ip", "link", "set", ns_if, "up")
        sh("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
        yield ns, host_if
    finally:
        subprocess.run(["ip", "link", "del", host_if], capture_output=True, check=False)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)


@pytest.fixture
def server(
    netns: tuple[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[EmbeddedPostgres]:
    pg = EmbeddedPostgres(
        tmp_path_factory.mktemp("netpg") / "data",
        settings={**FAST_SETTINGS, "listen_addresses": f"127.0.0.1,{HOST_IP}"},
        hba_lines=(f"host all all {NS_IP}/32 trust",),
    )
    pg.start()

    async def prepare() -> None:
        async with open_bridge(), open_database(DatabaseConfig(pg.dsn(), pool_size=1)) as db:
            await migrate(db)

    trio.run(prepare)
    try:
        yield pg
    finally:
        pg.destroy()


async def test_a_cut_off_worker_is_re_driven_and_fenced(
    netns: tuple[str, str], server: EmbeddedPostgres, tmp_path: Path, bridge: object
) -> None:
    ns, host_if = netns
    common = {
        "SURFACE_QUEUE_TYPE": "surface-probe",
        "DATAPLANE_PROBE": "1",
        "MAESTRO_LEASE_SECONDS": "3",
        "MAESTRO_RENEW_SECONDS": "1",
    }
    remote_dsn = f"host={HOST_IP} port={server.port} user=postgres dbname=postgres"
    stranded = WorkerProcess(
        {**common, "MAESTRO_QUEUES_URL": remote_dsn},
        str(tmp_path / "stranded.log"),
        prefix=("ip", "netns", "exec", ns),
    )
    rescuer = None
    try:
        await stranded.wait_ready()
        async with open_database(DatabaseConfig(server.dsn(), pool_size=4), loop=bridge) as db:
            queue = QueueClient(db)
            enq = await submit(queue, "probe", "sleep", {"ms": 2500})

            async def held_by_stranded() -> bool:
                row = await queue.get(enq.job_id)
                return row is not None and row.status == "in_progress"

            await wait_until(held_by_stranded, within=10)
            sh("ip", "link", "set", host_if, "down")  # the cut
            rescuer = WorkerProcess(
                {**common, "MAESTRO_QUEUES_URL": server.dsn()}, str(tmp_path / "rescuer.log")
            )
            await rescuer.wait_ready()

            async def done() -> bool:
                row = await queue.get(enq.job_id)
                return row is not None and row.status == "done"

            await wait_until(done, within=20)
            row = await queue.get(enq.job_id)
            assert row is not None and row.dequeue_count == 2
            rescued_by = row.locked_by
            sh("ip", "link", "set", host_if, "up")  # the link returns
            await wait_until(lambda: "lease lost" in stranded.output(), within=60)
            after = await queue.get(enq.job_id)
            assert after is not None
            assert (after.status, after.locked_by, after.dequeue_count) == ("done", rescued_by, 2)
            assert after.result == row.result
        with psycopg.connect(server.dsn()) as conn:
            count = conn.execute("SELECT count(*) FROM maestro_queues").fetchone()
        assert count == (1,)
    finally:
        stranded.stop()
        if rescuer is not None:
            rescuer.stop()
