"""Who reads the named SQL (issue #39): each file of ``sql/queries/`` is read by the
modules of one layer (the package of ``dataplane`` that owns those tables or that
session), and every statement is read by some module. A statement is read where its
name appears as a string (``q("job_get")``, or a name a module passes to ``q``), not
as a dict's key (``{"listen": ...}`` in a config)."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

from dataplane.db.sql import parse_queries, sql_root

ROOT = Path(__file__).resolve().parents[2]


def _files() -> dict[str, set[str]]:
    return {
        path.name: set(parse_queries(path.read_text(), source=path.name))
        for path in sorted((sql_root() / "queries").glob("*.sql"))
    }


def _readers() -> dict[str, set[str]]:
    """Query name -> the modules (dotted) whose code names it."""
    names = set().union(*_files().values())
    readers: dict[str, set[str]] = defaultdict(set)
    for path in sorted((ROOT / "dataplane").rglob("*.py")):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        tree = ast.parse(path.read_text())
        keys = {id(k) for d in ast.walk(tree) if isinstance(d, ast.Dict) for k in d.keys}
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and node.value in names and id(node) not in keys:
                readers[str(node.value)].add(module)
    return readers


def _layer(module: str) -> str:
    return ".".join(module.split(".")[:2])  # dataplane.queue, dataplane.db, ...


def test_each_sql_file_is_read_by_one_layer() -> None:
    readers = _readers()
    mixed = {}
    for file, names in _files().items():
        layers = {_layer(m) for name in names for m in readers.get(name, ())}
        if len(layers) > 1:
            mixed[file] = sorted(
                f"{name}: {', '.join(sorted(readers[name]))}" for name in names if name in readers
            )
    assert not mixed, mixed


def test_every_statement_is_read() -> None:
    readers = _readers()
    unread = sorted(n for names in _files().values() for n in names if n not in readers)
    assert not unread, unread
