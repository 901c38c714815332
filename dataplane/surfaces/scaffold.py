"""``dataplane new-surface NAME``: a minimal, working, tested surface package.

It writes ``NAME-surface/`` with a ``pyproject.toml`` that registers the surface
under the entry-point group ``dataplane.surfaces``, a module with one operation
(``hello {name}``, no client DB needed), and its tests, written with the test kit
(:mod:`dataplane.testing`: ``run_operation`` and ``plane``). After
``pip install -e 'NAME-surface[test]'`` its tests pass and ``dataplane dev`` serves it.

``NAME`` must be a surface id (:func:`~dataplane.queue.types.check_surface_id`) that
nothing registers yet: not the built-in ``probe``, not a surface of an installed
package (two registrations of one id refuse to load, in every process of the plane).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from dataplane.core.errors import InvalidArgument
from dataplane.queue.types import check_surface_id
from dataplane.surfaces import probe

PYPROJECT = """\
[build-system]
requires = ["hatchling>=1.24"]
build-backend = "hatchling.build"

[project]
name = "{dist}"
version = "0.1.0"
description = "The {name} surface of the Surface Data Plane"
requires-python = ">=3.11"
dependencies = ["dataplane"]

[project.optional-dependencies]
test = ["dataplane[testing]"]

[project.entry-points."dataplane.surfaces"]
{name} = "{module}:SURFACE"

[tool.hatch.build.targets.wheel]
packages = ["{module}"]

[tool.pytest.ini_options]
trio_mode = true
"""

MODULE = '''\
"""The {name} surface: its operations, registered through the entry point
``dataplane.surfaces`` in pyproject.toml."""

from __future__ import annotations

from typing import Any

from dataplane import HttpError, Operation, OperationContext, surface


async def hello(ctx: OperationContext) -> Any:
    """Greet ``name`` on behalf of the caller's client."""
    name = ctx.params["name"]
    if name == "nobody":
        raise HttpError(404, "nobody is here")  # an expected error: an answer, not a retry
    return {{"greeting": f"hello, {{name}}", "client": ctx.auth.client}}


SURFACE = surface(
    Operation(
        "hello",
        1,
        {{
            "type": "object",
            "properties": {{"name": {{"type": "string", "minLength": 1, "maxLength": 100}}}},
            "required": ["name"],
            "additionalProperties": False,
        }},
        hello,
        result={{  # what it answers (JSON Schema): in /openapi.json, checked in dataplane dev
            "type": "object",
            "properties": {{"greeting": {{"type": "string"}}, "client": {{"type": "string"}}}},
            "required": ["greeting", "client"],
            "additionalProperties": False,
        }},
        ttl_seconds=60,  # cached for a minute; 0 = always fresh
        timeout_seconds=5,
        description="Say hello.",
    ),
    id="{name}",
    description="The {name} surface.",
    needs_client_db=False,  # True: the worker gets DATAPLANE_CLIENT_DB_URL as ctx.client_db
)
'''

TEST = '''\
"""The {name} surface's operations, run as the plane runs them: through the real
worker (``run_operation``) and through a real BFF (``plane``), on a PostgreSQL server
the test kit starts (dataplane.testing; docs/testing.md)."""

from __future__ import annotations

import pytest

from dataplane.testing import Plane, RunOperation, token
from {module} import SURFACE

pytestmark = pytest.mark.dataplane(surfaces=SURFACE)  # what the kit serves these tests


async def test_hello_answers(run_operation: RunOperation) -> None:
    answer = await run_operation(SURFACE, "hello", {{"name": "world"}})
    assert answer.result == {{"greeting": "hello, world", "client": "acme"}}


async def test_bad_params_are_a_400_and_nobody_a_404(run_operation: RunOperation) -> None:
    bad = await run_operation(SURFACE, "hello", {{"name": ""}})
    assert bad.status == 400  # refused as the BFF refuses it: the job never runs
    nobody = await run_operation(SURFACE, "hello", {{"name": "nobody"}})
    assert nobody.error == {{"status": 404, "message": "nobody is here"}}  # an answer


async def test_a_browser_gets_it_through_the_bff(plane: Plane) -> None:
    answer = await plane.query(SURFACE, "hello", {{"name": "ada"}}, auth=token("globex"))
    assert answer.result == {{"greeting": "hello, ada", "client": "globex"}}
    assert answer.events[-1].name == "done"  # after "queued" if the job was not done yet
    (run,) = await plane.executions(SURFACE, "hello")  # one execution ran
    assert run.outcome == "done"
'''

README = """\
# {dist}

The `{name}` surface of the Surface Data Plane, written with `dataplane`'s public API.

    pip install -e .            # registers it (entry point dataplane.surfaces)
    pip install -e '.[test]' && python -m pytest   # dataplane's test kit
    dataplane surfaces          # lists it
    dataplane dev               # serves it: POST /api/{name}/q {{"operation": "hello", ...}}
"""


def scaffold(name: str, where: Path, registered: Mapping[str, str] | None = None) -> Path:
    """Write the package for surface ``name`` under ``where``; return its directory.
    ``registered``: the ids registered already, each with where from (the registry's
    origins); :class:`InvalidArgument` for one of them or ``probe``."""
    check_surface_id(name)  # as surface(...) will when the package is loaded
    if name == probe.SURFACE.id:
        raise InvalidArgument(f"{name!r} is the id of the built-in surface: choose another")
    if registered and name in registered:
        raise InvalidArgument(
            f"surface id {name!r} is registered already by {registered[name]}: choose another"
        )
    module = f"{name}_surface"
    dist = f"{name.replace('_', '-')}-surface"
    root = where / dist
    if root.exists():
        raise InvalidArgument(f"{root} already exists")
    values = {"name": name, "module": module, "dist": dist}
    files = {
        root / "pyproject.toml": PYPROJECT.format(**values),
        root / "README.md": README.format(**values),
        root / module / "__init__.py": MODULE.format(**values),
        root / "tests" / f"test_{name}.py": TEST.format(**values),
    }
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root
