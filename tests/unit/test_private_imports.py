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
