"""The longest surface id is served on the dev tier."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from dataplane.queue.types import MAX_SURFACE_ID_LENGTH
from dataplane.surfaces.scaffold import scaffold
from tests.acceptance.test_bff import poll_until_done, post
from tests.real_plane import start_bff

LONGEST = "g" + "r" * (MAX_SURFACE_ID_LENGTH - 1)


async def test_the_longest_id_is_served_on_the_dev_tier(
    bff_env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    nursery: trio.Nursery,
    spawn_worker: Callable[..., Any],
    tmp_path: Path,
) -> None:
    root = scaffold(LONGEST, tmp_path)
    entry = f"{LONGEST}_surface:SURFACE"
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.setenv("DATAPLANE_SURFACES", entry)
    monkeypatch.setenv("DATAPLANE_QUEUE_SUFFIX", "-dev")
    base, _app, shutdown = await start_bff(nursery)
    path = f"{root}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"
    await spawn_worker(f"surface-{LONGEST}-dev", DATAPLANE_SURFACES=entry, PYTHONPATH=path)
    async with httpx.AsyncClient(base_url=base, timeout=30) as http:
        assert (await http.get("/readyz")).status_code == 200
        body = (await post(http, LONGEST, "hello", {"name": "ada"})).json()
        with trio.fail_after(30):
            answer = await poll_until_done(http, body["pollUrl"])
        assert answer["result"] == {"greeting": "hello, ada", "client": "acme"}
    shutdown.set()
