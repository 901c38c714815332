"""/metrics at the edge: ``GET /metrics`` requires ``DATAPLANE_METRICS_TOKEN`` as a
bearer token when set, on the BFF and on capcom. (Unknown routes, static names and
``Expect: 100-continue``: tests/smoke/test_edge_routes.py.)
"""

from __future__ import annotations

from pathlib import Path

import httpx

from dataplane.dev.embedded import free_port
from tests.helpers import BffProcess, bearer, capcom_process


async def test_metrics_require_the_metrics_token_when_it_is_set(
    bff_env: dict[str, str], tmp_path: Path
) -> None:
    env = {**bff_env, "DATAPLANE_METRICS": "1", "DATAPLANE_METRICS_TOKEN": "scrape-me-please"}
    proc = BffProcess(env, str(tmp_path / "bff.log"), port=free_port(), args=("-k", "trio"))
    try:
        await proc.wait_ready()
        async with httpx.AsyncClient(base_url=proc.base, timeout=10) as client:
            for headers in ({}, bearer("wrong"), {"Authorization": "scrape-me-please"}):
                resp = await client.get("/metrics", headers=headers)
                assert resp.status_code == 401, resp.text
                assert resp.json()["error"] == {
                    "status": 401,
                    "code": "UNAUTHORIZED",
                    "message": "send Authorization: Bearer <DATAPLANE_METRICS_TOKEN>",
                }
            resp = await client.get("/metrics", headers=bearer("scrape-me-please"))
            assert resp.status_code == 200, resp.text
            assert resp.headers["content-type"].startswith("text/plain; version=0.0.4")
        assert "set DATAPLANE_METRICS_TOKEN" not in proc.output()
    finally:
        proc.stop()


async def test_metrics_without_a_token_are_open_and_say_so_at_startup(
    bff_env: dict[str, str], tmp_path: Path
) -> None:
    env = {**bff_env, "DATAPLANE_METRICS": "1"}
    proc = BffProcess(env, str(tmp_path / "bff.log"), port=free_port(), args=("-k", "trio"))
    try:
        await proc.wait_ready()
        async with httpx.AsyncClient(base_url=proc.base, timeout=10) as client:
            assert (await client.get("/metrics")).status_code == 200
        assert "set DATAPLANE_METRICS_TOKEN" in proc.output()
    finally:
        proc.stop()


async def test_capcoms_metrics_require_the_metrics_token_when_it_is_set(
    queue_dsn: str, tmp_path: Path
) -> None:
    """As the BFF's: capcom serves /metrics to the bearer of DATAPLANE_METRICS_TOKEN only."""
    env = {
        "DATAPLANE_CAPCOM_DB_URL": queue_dsn,
        "DATAPLANE_METRICS": "1",
        "DATAPLANE_METRICS_TOKEN": "scrape-capcom-please",
    }
    proc = capcom_process(env, str(tmp_path / "capcom.log"), "capcom-token-0123456789")
    try:
        await proc.wait_ready()
        async with httpx.AsyncClient(base_url=proc.base, timeout=10) as client:
            for headers in (
                {},
                bearer("wrong"),
                bearer("capcom-token-0123456789"),  # the report token is not the scrape token
                {"Authorization": "scrape-capcom-please"},
            ):
                resp = await client.get("/metrics", headers=headers)
                assert resp.status_code == 401, (headers, resp.text[:200])
                assert resp.json()["error"] == {
                    "status": 401,
                    "code": "UNAUTHORIZED",
                    "message": "send Authorization: Bearer <DATAPLANE_METRICS_TOKEN>",
                }
            resp = await client.get("/metrics", headers=bearer("scrape-capcom-please"))
            assert resp.status_code == 200, resp.text
            assert resp.headers["content-type"].startswith("text/plain; version=0.0.4")
        assert "set DATAPLANE_METRICS_TOKEN" not in proc.output()
    finally:
        proc.stop()

    # Without a token they stay open, and capcom says so at startup (as the BFF does).
    open_env = {k: v for k, v in env.items() if k != "DATAPLANE_METRICS_TOKEN"}
    proc = capcom_process(open_env, str(tmp_path / "capcom-open.log"), "capcom-token-0123456789")
    try:
        await proc.wait_ready()
        async with httpx.AsyncClient(base_url=proc.base, timeout=10) as client:
            assert (await client.get("/metrics")).status_code == 200
        assert "set DATAPLANE_METRICS_TOKEN" in proc.output()
    finally:
        proc.stop()
