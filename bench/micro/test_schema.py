"""Parameter validation per request: each operation's ``check`` (JSON Schema 2020-12,
defaults, integer normalisation, gates), what the BFF runs on every POST and the worker
again per job. Goal: at most 50 µs per request for the demo schemas.

``python -m pytest bench/micro/test_schema.py``
"""

from __future__ import annotations

from typing import Any

import pytest

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
SURFACES = all_surfaces(probe_enabled=True)


CASES = [key for key in PARAMS if key[0] in SURFACES]


@pytest.mark.benchmark(group="parameter validation per request")
@pytest.mark.parametrize(("surface", "name"), CASES, ids=[f"{s}.{n}" for s, n in CASES])
def test_check(benchmark: Any, surface: str, name: str) -> None:
    op = SURFACES[surface].operation(name)
    params = PARAMS[(surface, name)]
    benchmark(lambda: op.check(CALLER, dict(params)))
    assert benchmark.stats.stats.median * 1e6 <= TARGET_US
