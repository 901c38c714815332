"""The queue survives losing its Postgres primary (issue #33), through real processes.

A Patroni cluster (etcd, two nodes in synchronous mode, HAProxy), 2 BFFs and 2 workers
(one of each through the multi-host DSN, the other through HAProxy), a steady load,
then (a) a switchover and (b) node loss (SIGKILL of the primary's Patroni and
postmaster together), the same processes throughout: nobody is restarted. After
each: every 202 has exactly one answer on its stream, no row lost, none written
``done`` twice, no answer replaced; 503s carry Retry-After; the figures are printed.

Sized for the shared 2-core CI host (about 90 s for the file): 10 requests/s, a
switchover drill of 15 s and a node-loss drill of 40 s (Patroni's TTL is 20 s).
bench/failover.py runs the same drill with larger figures for docs/perf/failover.md.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import trio

from bench.harness.drill import DB_NAME, HAStack, broken_promises, prepare, run_drill, summary
from dataplane.core.errors import DatabaseUnavailable
from dataplane.db import DatabaseConfig, open_database, q
from dataplane.dev.ha import HACluster, Node

RATE = 10.0  # requests/s: what this shared 2-core host sustains beside the cluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HACluster]:
    ha = HACluster(tmp_path_factory.mktemp("ha") / "state")
    try:
        ha.up()
        prepare(ha)
        yield ha
    finally:
        ha.down()


def _other(cluster: HACluster, node: Node) -> Node:
    return next(n for n in cluster.nodes if n is not node)


async def _new_primary(cluster: HACluster, old: Node, within: float) -> Node:
    with trio.fail_after(within):
        while True:
            prim = await trio.to_thread.run_sync(cluster.primary)
            if prim is not None and prim is not old:
                return prim
            await trio.sleep(0.2)


LOCKS_HELD = """
SELECT 'on-call' AS lock, a.application_name
FROM pg_locks l JOIN pg_stat_activity a USING (pid)
WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
  AND l.classid::text::bigint = hashtext('dataplane.session_lock')::bigint & 4294967295
UNION ALL
SELECT 'leader', until::text FROM dataplane_elections
WHERE name = 'maintenance' AND until > now()
"""


async def _locks_retaken(cluster: HACluster, within: float = 30) -> None:
    """The workers' session advisory lock died with the old primary: the on-call lock is
    held again on the new one, by a worker; the maintenance leader's election (a row,
    replicated) is renewed there (its term moved on since first seen on the new
    primary)."""

    def held() -> dict[str, str]:
        with psycopg.connect(cluster.multihost_dsn(DB_NAME), connect_timeout=5) as conn:
            return {str(r[0]): str(r[1]) for r in conn.execute(LOCKS_HELD)}  # type: ignore[arg-type]

    seen: dict[str, str] = {}
    first_term: str | None = None
    renewed = False
    with trio.move_on_after(within):
        while not ("on-call" in seen and renewed):
            await trio.sleep(0.5)
            seen = await trio.to_thread.run_sync(held)
            term = seen.get("leader")
            first_term = first_term or term
            renewed = renewed or (term is not None and term != first_term)
    assert "on-call" in seen and renewed, f"held on the new primary: {seen} (first {first_term})"
    assert seen["on-call"].startswith("dataplane-worker"), seen


async def test_a_writer_never_keeps_a_connection_to_a_standby(
    cluster: HACluster, bridge: object
) -> None:
    """HAProxy's read-only port leads to the standby (as its read-write port does, for a
    second or two, to a just-demoted primary): a writer's pool refuses it as unavailable
    (a 503 at the BFF, a retry at the worker), never a 500 per write; a read-only
    config (the wallboard's, a client DB's) uses it."""
    standby = cluster.haproxy_dsn(DB_NAME, readonly=True)
    async with open_database(DatabaseConfig(standby, pool_size=1)) as db:
        with pytest.raises(DatabaseUnavailable, match="is a standby"):
            await db.fetchone(q("ping"))
    async with open_database(DatabaseConfig(standby, pool_size=1, read_only=True)) as db:
        assert await db.fetchone(q("ping")) is not None


async def test_switchover_then_node_loss_under_load(cluster: HACluster, tmp_path: Path) -> None:
    stack = HAStack(cluster, tmp_path)
    try:
        await stack.start()
        first = cluster.primary()
        assert first is not None

        async def switchover() -> None:
            target = _other(cluster, first)
            done = await trio.to_thread.run_sync(
                lambda: cluster.patronictl(
                    "switchover", "--leader", first.name, "--candidate", target.name, "--force"
                )
            )
            assert done.returncode == 0, done.stdout + done.stderr
            await _new_primary(cluster, first, 30)

        drill = await run_drill(stack, "switchover", switchover, rate=RATE, duration=15, fault_at=5)
        print(f"\nswitchover: {summary(drill)}")
        assert not broken_promises(drill), broken_promises(drill)[:20]
        assert not stack.dead(), stack.dead()
        assert drill.write_outage() > 0.3, "the switchover was never felt by a writer"
        second = cluster.primary()
        assert second is not None and second is not first
        await _locks_retaken(cluster)
        # The topology's promise (a 202 exists on the standby) holds once the old primary
        # is the synchronous standby again: a node lost before that loses commits.
        await trio.to_thread.run_sync(cluster.wait_synchronous, 90)

        async def node_loss() -> None:
            cluster.kill_node(second)
            await _new_primary(cluster, second, 60)

        drill = await run_drill(stack, "node-loss", node_loss, rate=RATE, duration=40, fault_at=5)
        print(f"\nnode loss: {summary(drill)}")
        assert not broken_promises(drill), broken_promises(drill)[:20]
        assert not stack.dead(), stack.dead()
        assert drill.write_outage() > 5, "the node loss was never felt by a writer"
        assert drill.refused() > 0, "no BFF refused a request while no primary was reachable"
        await _locks_retaken(cluster)
    finally:
        stack.stop()
