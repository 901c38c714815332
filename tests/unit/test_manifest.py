"""Parameter validation (the JSON Schema subset) and gates."""

from __future__ import annotations

import pytest

from dataplane.core.errors import HttpError
from dataplane.queue.envelope import Auth
from dataplane.surfaces.manifest import STAFF_ONLY, branch_in_scope, validate

SCHEMA = {
    "type": "object",
    "properties": {
        "n": {"type": "integer", "minimum": 1, "maximum": 10},
        "s": {"type": "string", "maxLength": 3, "pattern": "^[a-z]+$"},
        "e": {"enum": ["a", "b"]},
        "l": {"type": "array", "items": {"type": "integer"}, "maxItems": 2},
        "d": {"type": "integer", "default": 5},
    },
    "required": ["n"],
    "additionalProperties": False,
}


def test_valid_params_are_normalised() -> None:
    assert validate(SCHEMA, {"n": 3.0, "l": [1, 2.0]}) == {"n": 3, "l": [1, 2], "d": 5}


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({}, "params.n: is required"),
        ({"n": "3"}, "params.n: expected integer"),
        ({"n": True}, "params.n: expected integer"),
        ({"n": 3.5}, "params.n: expected integer"),
        ({"n": 0}, "params.n: must be >= 1"),
        ({"n": 11}, "params.n: must be <= 10"),
        ({"n": 1, "s": "abcd"}, "at most 3"),
        ({"n": 1, "s": "AB"}, "must match"),
        ({"n": 1, "e": "c"}, "must be one of"),
        ({"n": 1, "l": [1, 2, 3]}, "at most 2 items"),
        ({"n": 1, "l": ["x"]}, "params.l[0]: expected integer"),
        ({"n": 1, "zzz": 1}, "unknown field(s) zzz"),
    ],
)
def test_invalid_params_say_what_is_wrong(params: dict[str, object], message: str) -> None:
    with pytest.raises(HttpError) as info:
        validate(SCHEMA, params)
    assert info.value.status == 400 and message in info.value.message


def test_gates() -> None:
    staff = Auth("acme", "1", "", True, ("*",))
    north = Auth("acme", "2", "", False, ("acme-north",))
    STAFF_ONLY(staff, {})
    with pytest.raises(HttpError) as info:
        STAFF_ONLY(north, {})
    assert info.value.status == 403
    gate = branch_in_scope("branch")
    gate(north, {"branch": "acme-north"})
    gate(north, {})
    gate(staff, {"branch": "acme-south"})
    with pytest.raises(HttpError):
        gate(north, {"branch": "acme-south"})
