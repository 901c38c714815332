"""Named SQL statements, loaded from the ``sql/queries/*.sql`` files.

Each statement sits under a ``-- name: noun_verb`` header followed by a one-line
``--`` description. Runtime code never builds SQL strings: it looks statements up
here by name. The ``sql/`` tree lives at the repository root and is shipped
inside the wheel as ``dataplane/sql``.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import LiteralString

_HEADER = re.compile(r"^--\s*name:\s*([a-z][a-z0-9_]*)\s*$", re.MULTILINE)
_NAMES: dict[str, str] = {}  # statement text -> its name, for spans (every loaded file)


def statement_name(text: str) -> str | None:
    """The name of a loaded statement (``job_claim``), None for any other text."""
    return _NAMES.get(text)


def _named(found: dict[str, LiteralString]) -> dict[str, LiteralString]:
    for name, body in found.items():
        _NAMES.setdefault(body, name)
    return found


def sql_root() -> Path:
    """The ``sql/`` directory: inside the installed package, or the source tree's."""
    package = Path(__file__).resolve().parents[1]  # dataplane/
    for candidate in (package / "sql", package.parent / "sql"):
        if (candidate / "migrations").is_dir():
            return candidate
    raise FileNotFoundError(f"no sql/ directory in or next to {package}")


def parse_queries(text: str, *, source: str = "<string>") -> dict[str, LiteralString]:
    """Split a ``.sql`` file into ``{name: statement}``; duplicate names are an error."""
    queries: dict[str, LiteralString] = {}
    matches = list(_HEADER.finditer(text))
    for i, match in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(text)
        body_lines = [
            line for line in text[match.end() : end].splitlines() if not line.startswith("--")
        ]
        body = _compact("\n".join(body_lines).strip().rstrip(";").strip())
        name = match.group(1)
        if not body:
            raise ValueError(f"{source}: query {name!r} is empty")
        if name in queries:
            raise ValueError(f"{source}: query {name!r} defined twice")
        queries[name] = body  # our own files: literal SQL, never built from input
    return queries


def _compact(body: str) -> LiteralString:
    """``body`` with each line's indentation dropped, when no literal spans lines.

    psycopg caches the parsing of a statement's placeholders only up to
    ``MAX_CACHED_STATEMENT_LENGTH`` (4,096) characters; a longer one is parsed
    again, with regular expressions, at every execution. Indentation is most of
    the excess of our longest statements (``job_claim``). A statement with a
    dollar-quoted body, or a line with an odd number of quotes (a string literal
    running across lines), is left as written: its whitespace may be data.
    """
    lines = body.splitlines()
    if "$" in body or any(line.count("'") % 2 for line in lines):
        return body
    return "\n".join(line.strip() for line in lines)


@cache
def queries() -> dict[str, LiteralString]:
    """Every named statement of ``sql/queries/``."""
    found: dict[str, LiteralString] = {}
    for path in sorted((sql_root() / "queries").glob("*.sql")):
        for name, body in parse_queries(path.read_text(), source=path.name).items():
            if name in found:
                raise ValueError(f"{path.name}: query {name!r} also defined in another file")
            found[name] = body
    return _named(found)


def q(name: str) -> LiteralString:
    """The statement called ``name``."""
    try:
        return queries()[name]
    except KeyError:
        raise KeyError(f"no SQL statement named {name!r} in sql/queries/") from None


class NamedQueries:
    """The named statements of a surface package's own ``.sql`` files.

    ``NamedQueries(Path(__file__).parent / "sql")`` loads every ``*.sql`` file there
    (``-- name: noun_verb`` headers, as the plane's own); calling it with a name
    returns the statement.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._queries: dict[str, LiteralString] | None = None

    def __call__(self, name: str) -> LiteralString:
        if self._queries is None:
            found: dict[str, LiteralString] = {}
            for path in sorted(self.directory.glob("*.sql")):
                for key, body in parse_queries(path.read_text(), source=path.name).items():
                    if key in found:
                        raise ValueError(f"{path.name}: query {key!r} also defined in another file")
                    found[key] = body
            self._queries = _named(found)
        try:
            return self._queries[name]
        except KeyError:
            raise KeyError(f"no SQL statement named {name!r} in {self.directory}") from None
