"""The house's size limits (issue #31): no module over 400 lines, no function over 80,
outside ``bench/`` and ``tests/`` (the package, ``telemetry`` and the example surfaces)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("dataplane", "telemetry", "examples", "scripts")
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 80  # from the ``def`` (decorators excluded) to its last line


def _modules() -> list[Path]:
    found = []
    for package in PACKAGES:
        found += [p for p in (ROOT / package).rglob("*.py") if "tests" not in p.parts]
    return sorted(found)


def test_no_module_over_400_lines() -> None:
    long = []
    for path in _modules():
        lines = path.read_text().count("\n")
        if lines > MAX_MODULE_LINES:
            long.append(f"{path.relative_to(ROOT)}: {lines}")
    assert not long, "modules over 400 lines:\n" + "\n".join(long)


def test_no_function_over_80_lines() -> None:
    long = []
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                assert node.end_lineno is not None
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}: {lines}")
    assert not long, "functions over 80 lines:\n" + "\n".join(long)
