"""Flow bounds: what an operation may declare, and what a claim is given."""

from __future__ import annotations

import json
from typing import Any

import pytest

from dataplane.core.errors import InvalidArgument
from dataplane.queue.records import FlowBound, bounds_json
from dataplane.surfaces.manifest import Operation, surface
from dataplane.surfaces.probe import SURFACE as PROBE
from dataplane.worker.claims.claimer import flow_bounds

PARAMS = {"type": "object", "properties": {}}


async def handler(ctx: Any) -> Any:
    return {}


def op(**kw: Any) -> Operation:
    return Operation("work", 1, PARAMS, handler, **kw)


def test_an_operation_is_unbounded_by_default() -> None:
    assert op().max_concurrency is None and op().max_concurrency_per_client is None


@pytest.mark.parametrize("value", [1, 2, 1000])
def test_a_bound_is_an_integer_of_at_least_one(value: int) -> None:
    assert op(max_concurrency=value).max_concurrency == value
    assert op(max_concurrency_per_client=value).max_concurrency_per_client == value


@pytest.mark.parametrize("value", [0, -1, 1.5, 2.0, True, False, "2"])
@pytest.mark.parametrize("field", ["max_concurrency", "max_concurrency_per_client"])
def test_any_other_bound_is_refused_naming_it(field: str, value: Any) -> None:
    with pytest.raises(InvalidArgument, match=f"operation 'work': {field} must be an integer"):
        op(**{field: value})


def test_the_claims_bounds_are_the_bounded_operations_latest_versions() -> None:
    s = surface(
        Operation("old", 1, PARAMS, handler, max_concurrency=5),
        Operation("old", 2, PARAMS, handler, max_concurrency=3, max_concurrency_per_client=1),
        Operation("free", 1, PARAMS, handler),
        Operation("mine", 1, PARAMS, handler, max_concurrency_per_client=2),
        id="flowy",
        needs_client_db=False,
    )
    bounds = flow_bounds(s)
    assert bounds == {"old": FlowBound(3, 1), "mine": FlowBound(None, 2)}
    assert json.loads(bounds_json(bounds) or "") == {
        "mine": {"max": None, "per_client": 2},
        "old": {"max": 3, "per_client": 1},
    }
    assert flow_bounds(PROBE) == {"bounded": FlowBound(max=2)}


def test_no_bound_is_no_parameter() -> None:
    assert bounds_json(None) is None
    assert bounds_json({}) is None
    assert bounds_json({"x": FlowBound()}) is None


@pytest.mark.parametrize("value", [0, 1.5, True])
def test_a_flow_bound_checks_itself(value: Any) -> None:
    with pytest.raises(InvalidArgument):
        FlowBound(max=value)
    with pytest.raises(InvalidArgument):
        FlowBound(per_client=value)
