"""Surface ids are checked where they are declared, against the names built from them.

* ``dataplane new-surface NAME`` refuses a name no queue type or channel can be
  built from, with one line and a non-zero exit, and writes nothing.
* The longest id it accepts is served end to end on the dev tier (whose wake
  channel, the longest name of all, is then exactly 63 bytes).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from dataplane.queue.types import MAX_SURFACE_ID_LENGTH
from dataplane.surfaces.scaffold import scaffold
from tests.acceptance.conftest import start_bff
from tests.acceptance.test_bff import poll_until_done, post

LONGEST = "g" + "r" * (MAX_SURFACE_ID_LENGTH - 1)


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("g" * (MAX_SURFACE_ID_LENGTH + 1), "63-byte identifier limit"),
        ("a_rather_long_surface_name_for_the_reports_team", "at most 42 fit"),
        ("greeter_dev", "may not end in '_dev'"),
        ("Greeter", "lower-case letters, digits and _"),
    ],
)
async def test_new_surface_refuses_a_name_with_one_line_and_writes_nothing(
    tmp_path: Path, name: str, problem: str
) -> None:
    done = await trio.run_process(
        [sys.executable, "-m", "dataplane", "new-surface", name, "--dir", str(tmp_path)],
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    err = done.stderr.decode()
    assert done.returncode != 0, (done.stdout, err)
    assert err.count("\n") == 1 and err.startswith("dataplane new-surface: "), err
    assert problem in err
    assert list(await trio.Path(tmp_path).iterdir()) == []


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
