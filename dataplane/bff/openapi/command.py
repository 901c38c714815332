"""``dataplane openapi [--out FILE]``: the OpenAPI document, without a server.

The document ``GET /openapi.json`` serves (:func:`~dataplane.bff.openapi.document.openapi_document`)
for the surfaces the BFF's configuration would load (the registry, ``DATAPLANE_SURFACES``
and ``DATAPLANE_PROBE`` honoured as ``dataplane surfaces`` honours them): what the
browser client's generator (``npx surface-dataplane generate``) reads. Keys sorted, two
spaces, one newline at the end: the same surfaces give the same bytes, so a checked-in
copy diffs cleanly.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from dataplane.bff.openapi.document import openapi_document
from dataplane.core.settings import from_env
from dataplane.surfaces import SurfacesConfig


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    cmd = sub.add_parser(
        "openapi",
        help="the OpenAPI document of the registered surfaces (what /openapi.json serves)",
    )
    cmd.add_argument("--out", metavar="FILE", help="write it here (default: stdout)")


def document() -> dict[str, Any]:
    """The document for the surfaces of this environment, as the BFF loads them."""
    return openapi_document(from_env(SurfacesConfig).registry().surfaces)


def render(doc: dict[str, Any]) -> str:
    """Stable text: sorted keys, indented, a final newline."""
    return json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def run(args: argparse.Namespace) -> int:
    doc = document()
    text = render(doc)
    if args.out is None:
        sys.stdout.write(text)
        return 0
    Path(args.out).write_text(text, encoding="utf-8")
    operations = sum(  # the surfaces' operations: the variants of each enqueue route
        len(item["post"]["requestBody"]["content"]["application/json"]["schema"]["oneOf"])
        for path, item in doc["paths"].items()
        if path.endswith("/q")
    )
    print(f"wrote {args.out}: OpenAPI {doc['openapi']}, {operations} operations", file=sys.stderr)
    return 0
