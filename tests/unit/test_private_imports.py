"""Only ``dataplane.compat`` imports the private modules of the libraries we patch.

import-linter cannot say this: its forbidden contract names external packages by their
root only (2.17: "subpackages of external packages are not valid"), and forbidding
``hypercorn`` or ``psycopg`` whole is not the rule. So this walks every module of
``dataplane/`` and ``telemetry/`` and fails on an import of a private module or name of
a patched library outside ``dataplane/compat/`` (pyproject.toml says so beside the
contracts). A private name is one that starts with ``_``, or a module or name listed
here: internals without the underscore that a replacement reaches into.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PATCHED = ("hypercorn", "quart_trio", "quart", "trio_asyncio", "psycopg", "opentelemetry", "h11")
# Internals without an underscore: Hypercorn's protocol and trio server, Quart-Trio's
# request wrappers, psycopg's wait machinery, the SDK's span internals. (The OTLP
# exporter's ``_client`` is read with getattr: test_compat pins it, not this walk.)
PRIVATE_MODULES = (
    "hypercorn.protocol",
    "hypercorn.events",
    "hypercorn.trio.tcp_server",
    "hypercorn.trio.task_group",
    "hypercorn.trio.worker_context",
    "quart_trio.wrappers",
    "psycopg.waiting",
    "psycopg.generators",
    "psycopg.abc",
    "opentelemetry.sdk.util",
)
PRIVATE_NAMES = {
    "opentelemetry.sdk.trace": {"ReadableSpan", "Event", "Span", "SpanProcessor"},
}


def _is_private_module(name: str) -> bool:
    parts = name.split(".")
    if parts[0] not in PATCHED:
        return False
    if any(part.startswith("_") for part in parts):
        return True
    return any(name == m or name.startswith(m + ".") for m in PRIVATE_MODULES)


def private_imports(source: str) -> list[str]:
    """The private imports (``module`` or ``module.name``) in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if _is_private_module(a.name)]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            module = node.module
            if _is_private_module(module):
                found.append(module)
                continue
            for alias in node.names:
                dotted = f"{module}.{alias.name}"
                if module.split(".")[0] in PATCHED and (
                    alias.name.startswith("_")
                    or alias.name in PRIVATE_NAMES.get(module, ())
                    or _is_private_module(dotted)
                ):
                    found.append(dotted)
        elif isinstance(node, ast.Attribute) and node.attr.startswith("_"):
            # psycopg.errors._WaitTimeout and the like, read through a module's name
            base = node.value
            while isinstance(base, ast.Attribute):
                base = base.value
            if isinstance(base, ast.Name) and base.id in PATCHED and not node.attr.startswith("__"):
                found.append(ast.unparse(node))
    return found


def test_only_compat_imports_private_modules_of_patched_libraries() -> None:
    offenders = []
    for package in ("dataplane", "telemetry"):
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            if relative.startswith("dataplane/compat/"):
                continue
            offenders += [f"{relative}: {name}" for name in private_imports(path.read_text())]
    assert not offenders, "outside dataplane/compat:\n" + "\n".join(offenders)


def test_the_check_sees_each_kind_of_reach() -> None:
    source = """
import hypercorn.protocol
import trio_asyncio._loop
from hypercorn.trio.tcp_server import TCPServer
from psycopg.waiting import WAIT_R
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
import psycopg
psycopg.errors._WaitTimeout
from hypercorn.config import Config
"""
    assert private_imports(source) == [
        "hypercorn.protocol",
        "trio_asyncio._loop",
        "hypercorn.trio.tcp_server",
        "psycopg.waiting",
        "opentelemetry.sdk.trace.ReadableSpan",
        "psycopg.errors._WaitTimeout",
    ]


# -- private attributes read outside compat -------------------------------------------
# An import is not the only reach: ``request.body._complete`` or
# ``getattr(meter, "_real_meter")`` read a patched library's internals through an
# object. Types are not known here, so the rule is by name: outside dataplane/compat/,
# a private attribute (``_x``, not a dunder) may be read only if our own code defines
# that name somewhere (an attribute it sets, a function, class or variable it names,
# a slot); and a standard-library module's own private names are the library's API
# (``os._exit``, ``argparse._SubParsersAction`` in a type).
STDLIB_BASES = {"os", "argparse", "sys"}


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def defined_private_names(sources: list[str]) -> set[str]:
    """The private names our code defines anywhere."""
    ours: set[str] = set()
    for source in sources:
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                name = node.name
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                name = node.attr
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                name = node.id
            elif isinstance(node, ast.arg):
                name = node.arg
            elif isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "__slots__" for t in node.targets
            ):
                ours.update(
                    c.value
                    for c in ast.walk(node.value)
                    if isinstance(c, ast.Constant) and isinstance(c.value, str)
                )
                continue
            else:
                continue
            if _private(name):
                ours.add(name)
    return ours


def private_reads(source: str, ours: set[str]) -> list[str]:
    """Reads of private attributes not ours (``x._y``, ``getattr(x, "_y")``)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
            base = node.value
            if not _private(node.attr) or node.attr in ours:
                continue
            if isinstance(base, ast.Name) and base.id in STDLIB_BASES:
                continue
            found.append(ast.unparse(node))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "hasattr", "setattr", "delattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
            and _private(node.args[1].value)
            and node.args[1].value not in ours
        ):
            found.append(ast.unparse(node))
    return found


def test_only_compat_reads_private_attributes_of_other_libraries() -> None:
    paths = sorted(
        p for package in ("dataplane", "telemetry") for p in (ROOT / package).rglob("*.py")
    )
    ours = defined_private_names([p.read_text() for p in paths])
    offenders = []
    for path in paths:
        relative = path.relative_to(ROOT).as_posix()
        if not relative.startswith("dataplane/compat/"):
            offenders += [f"{relative}: {r}" for r in private_reads(path.read_text(), ours)]
    assert not offenders, "outside dataplane/compat:\n" + "\n".join(offenders)


def test_the_attribute_check_sees_each_kind_of_read() -> None:
    source = """
class Ours:
    __slots__ = ("_slot",)
    def __init__(self):
        self._mine = 1
def _helper(): ...
request.body._complete
getattr(meter, "_real_meter", meter)
x._mine, y._slot, _helper(), os._exit(1), z.__dict__
"""
    ours = defined_private_names([source])
    assert private_reads(source, ours) == [
        "request.body._complete",
        "getattr(meter, '_real_meter', meter)",
    ]
