"""The test kit's plugin is declared where pytest finds it (the ``pytest11`` entry
point, under the name ``-p dataplane.testing`` uses), and its fixtures leave every name
of tests/conftest.py and tests/real_plane.py to them."""

from __future__ import annotations

import tomllib
from pathlib import Path

from _pytest.fixtures import FixtureFunctionDefinition

import dataplane.testing.plugin
import tests.conftest
import tests.real_plane

ROOT = Path(__file__).resolve().parents[2]


def _fixtures(module: object) -> set[str]:
    return {n for n, value in vars(module).items() if isinstance(value, FixtureFunctionDefinition)}


def test_the_plugin_is_the_pytest11_entry_point_of_its_extra() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["entry-points"]["pytest11"] == {"dataplane.testing": "dataplane.testing.plugin"}
    assert {"pytest", "pytest-trio"} <= {
        spec.split(">")[0] for spec in project["optional-dependencies"]["testing"]
    }
    assert dataplane.testing.pytest_plugins == ["dataplane.testing.plugin"]


def test_its_fixture_names_are_its_own() -> None:
    kit = _fixtures(dataplane.testing.plugin)
    assert {"run_operation", "plane", "dataplane_kit", "dataplane_surfaces"} <= kit
    assert all(name.startswith("dataplane_") or name in ("run_operation", "plane") for name in kit)
    ours = _fixtures(tests.conftest) | _fixtures(tests.real_plane)
    assert "queue_dsn" in ours and not kit & ours, kit & ours
