"""What ``dataplane surfaces`` shows: one row per declared operation version.

Its JSON (``--json``) is each row as it is; the table is one line a row: ttl, timeout,
whether a result schema is declared, the flow bounds (``max_concurrency`` /
``max_concurrency_per_client``, ``-`` for none), gates, cache tags, where it came from.
"""

from __future__ import annotations

from typing import Any

from dataplane.surfaces.registry import Registry


def operation_rows(registry: Registry) -> list[dict[str, Any]]:
    """Every operation version of every registered surface, sorted."""
    rows: list[dict[str, Any]] = []
    for sid, entry in sorted(registry.entries.items()):
        for (name, version), op in sorted(entry.surface.versions.items()):
            rows.append(
                {
                    "surface": sid,
                    "operation": name,
                    "version": version,
                    "latest": entry.surface.operations[name].version == version,
                    "ttlSeconds": op.ttl_seconds,
                    "timeoutSeconds": op.timeout_seconds,
                    "gates": [getattr(g, "name", g) for g in op.gates],
                    "tags": ["c:<client>"]
                    + (["u:<caller>"] if op.per_user else [])
                    + ([f"u:<params.{op.user_param}>"] if op.user_param else []),
                    "needsClientDb": entry.surface.needs_client_db,
                    "resultSchema": op.result is not None,
                    "maxConcurrency": op.max_concurrency,
                    "maxConcurrencyPerClient": op.max_concurrency_per_client,
                    "from": entry.origin,
                }
            )
    return rows


def table_lines(rows: list[dict[str, Any]]) -> list[str]:
    """The rows as a table, a header first."""
    lines: list[str] = []
    head = f"{'surface.operation':32} {'ver':>3} {'ttl':>5} {'timeout':>7} {'result':6}"
    lines.append(f"{head} {'flow':9}  gates / tags / from")
    for r in rows:
        gates = ",".join(r["gates"]) or "-"
        flow = f"{r['maxConcurrency'] or '-'}/{r['maxConcurrencyPerClient'] or '-'}"
        lines.append(
            f"{r['surface'] + '.' + r['operation']:32} {r['version']:>3} {r['ttlSeconds']:>5g} "
            f"{r['timeoutSeconds']:>7g} {'schema' if r['resultSchema'] else '-':6} {flow:9}"
            f"  {gates} / {','.join(r['tags'])} / {r['from']}"
        )
    return lines
