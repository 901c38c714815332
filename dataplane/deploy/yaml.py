"""A small YAML writer for the rendered manifests (the image has no YAML library).

It writes the subset manifests need: mappings (keys in the order given), sequences,
strings, integers, booleans and null. A string is written plain only when YAML
reads it back as the same string (no indicator, no number or boolean look-alike);
any other string, multi-line SQL included, is written as a JSON string, which is a
valid YAML double-quoted scalar. ``yaml.safe_load(dump(x)) == x`` is a test.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

_PLAIN = re.compile(r"[A-Za-z_/][A-Za-z0-9_./=:-]*")
_KEY = re.compile(r"[A-Za-z0-9_./-]+")
# Plain scalars that YAML 1.1 (PyYAML, kubectl) would read as something else.
_RESERVED = frozenset(
    "y n yes no on off true false null ~ Y N Yes No On Off True False Null".split()
    + "YES NO ON OFF TRUE FALSE NULL".split()
)


def _scalar(value: object) -> str:
    if value is None:
        return "null"
    if value is True or value is False:
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        if _PLAIN.fullmatch(value) and value not in _RESERVED and not value.endswith(":"):
            return value
        return json.dumps(value)
    raise TypeError(f"cannot write {type(value).__name__} as YAML: {value!r}")


def _key(key: str) -> str:
    return key if _KEY.fullmatch(key) and key not in _RESERVED else json.dumps(key)


def _lines(value: Any, indent: int) -> Iterable[str]:
    pad = " " * indent
    if isinstance(value, Mapping):
        for key, item in value.items():
            if isinstance(item, Mapping | list) and item:
                yield f"{pad}{_key(key)}:"
                yield from _lines(item, indent + 2 if isinstance(item, Mapping) else indent)
            else:
                yield f"{pad}{_key(key)}: {_empty_or_scalar(item)}"
    elif isinstance(value, list):
        for item in value:
            if isinstance(item, Mapping | list) and item:
                inner = list(_lines(item, indent + 2))
                yield f"{pad}- {inner[0].lstrip()}"
                yield from inner[1:]
            else:
                yield f"{pad}- {_empty_or_scalar(item)}"
    else:
        yield f"{pad}{_scalar(value)}"


def _empty_or_scalar(value: Any) -> str:
    if isinstance(value, Mapping):
        return "{}"
    if isinstance(value, list):
        return "[]"
    return _scalar(value)


def dump(document: Mapping[str, Any]) -> str:
    """One YAML document, ending with a newline."""
    return "\n".join(_lines(document, 0)) + "\n"


def dump_all(documents: Sequence[Mapping[str, Any]]) -> str:
    """Several documents, separated by ``---`` lines."""
    return "---\n".join(dump(d) for d in documents)
