"""Surface ids are checked where they are declared, against the names built from them.

* ``dataplane new-surface NAME`` refuses a name no queue type or channel can be
  built from, or one registered already (the built-in ``probe``, an installed
  package's surface), with one line and a non-zero exit, and writes nothing.
* The longest id it accepts is served end to end on the dev tier (whose wake
  channel, the longest name of all, is then exactly 63 bytes):
  tests/smoke/test_surface_ids.py.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import trio

from dataplane.queue.types import MAX_SURFACE_ID_LENGTH


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("g" * (MAX_SURFACE_ID_LENGTH + 1), "63-byte identifier limit"),
        ("a_rather_long_surface_name_for_the_reports_team", "at most 42 fit"),
        ("greeter_dev", "may not end in '_dev'"),
        ("Greeter", "lower-case letters, digits and _"),
        ("probe", "'probe' is the id of the built-in surface"),
        ("good", "'good' is registered already by tests.unit.surface_fixtures:GOOD"),
    ],
)
async def test_new_surface_refuses_a_name_with_one_line_and_writes_nothing(
    tmp_path: Path, name: str, problem: str
) -> None:
    done = await trio.run_process(
        [sys.executable, "-m", "dataplane", "new-surface", name, "--dir", str(tmp_path)],
        env={**os.environ, "DATAPLANE_SURFACES": "tests.unit.surface_fixtures:GOOD"},
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    err = done.stderr.decode()
    assert done.returncode != 0, (done.stdout, err)
    assert err.count("\n") == 1 and err.startswith("dataplane new-surface: "), err
    assert problem in err
    assert list(await trio.Path(tmp_path).iterdir()) == []
