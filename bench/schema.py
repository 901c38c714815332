"""Parameter validation cost: JSON Schema 2020-12 (jsonschema-rs, compiled once per
operation) per request, for every operation of the demo LMS and probe surfaces.

Each operation's ``check`` (schema validation, defaults, integer normalisation and
gates — what the BFF runs on every POST and the worker again per job) is timed on a
typical parameter set; prints a table and writes ``bench/results/schema.json``.
Target: under 50 µs per request for the demo schemas.

    python bench/schema.py [--rounds 20000]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import argparse
import json
import statistics
import time
from typing import Any

from bench.harness.common import format_table, machine_info, now_iso, output_arg
from dataplane import Auth
from dataplane.surfaces import all_surfaces

TARGET_US = 50.0
CALLER = Auth(client="acme", user_id="7", actor_email="", staff=True, branches=("*",))
PARAMS: dict[tuple[str, str], dict[str, Any]] = {
    ("users", "list"): {"limit": 20, "q": "ann", "branch": "acme-north"},
    ("users", "detail"): {"userId": 42},
    ("learnerviews", "branchSummary"): {"branch": "acme-north"},
    ("learnerviews", "courseSummary"): {"branch": "acme-north"},
    ("learnerviews", "learner"): {"userId": 42},
    ("accounting", "invoices"): {"status": "paid", "limit": 50},
    ("accounting", "invoice"): {"invoiceId": 7},
    ("accounting", "invoicePdf"): {"invoiceId": 7},
    ("skills", "coverage"): {"branch": "acme-north"},
    ("skills", "profile"): {"userId": 42},
    ("probe", "echo"): {"value": {"a": [1, 2, 3]}},
    ("probe", "sleep"): {"ms": 10},
}


def measure(rounds: int) -> dict[str, Any]:
    surfaces = all_surfaces(probe_enabled=True)
    rows = []
    for (sid, name), params in PARAMS.items():
        if sid not in surfaces:
            continue
        op = surfaces[sid].operation(name)
        op.check(CALLER, dict(params))  # warm
        samples = []
        for _ in range(5):
            started = time.perf_counter()
            for _ in range(rounds):
                op.check(CALLER, dict(params))
            samples.append((time.perf_counter() - started) / rounds * 1e6)
        rows.append({"operation": f"{sid}.{name}", "us_per_check": statistics.median(samples)})
    return {
        "date": now_iso(),
        "machine": machine_info("-"),
        "config": {"rounds": rounds, "validator": "jsonschema-rs Draft202012Validator"},
        "operations": rows,
        "max_us": max(r["us_per_check"] for r in rows),
        "target_us": TARGET_US,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=20_000)
    output_arg(parser, "schema")
    args = parser.parse_args(argv)
    result = measure(args.rounds)
    print(
        format_table(
            ["operation", "µs per check"],
            [[r["operation"], round(r["us_per_check"], 2)] for r in result["operations"]],
        )
    )
    verdict = "met" if result["max_us"] <= TARGET_US else "NOT met"
    print(f"\nslowest {result['max_us']:.2f} µs per request; target <= {TARGET_US:g} µs: {verdict}")
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
