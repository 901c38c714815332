"""Result schemas (issue #40): declared on an operation, compiled when it is built,
reported by the first difference, exported in ``/openapi.json``."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest
from openapi_spec_validator.validation import OpenAPIV31SpecValidator

from dataplane.bff.openapi import openapi_document
from dataplane.core.errors import InvalidArgument
from dataplane.core.settings import from_env
from dataplane.surfaces import SurfacesConfig, probe
from dataplane.surfaces.manifest import Operation, OperationContext, surface_of

PARAMS = {"type": "object", "properties": {}, "additionalProperties": False}
ROWS = {
    "type": "object",
    "properties": {
        "items": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"id": {"type": "string"}, "n": {"type": "integer"}},
                "required": ["id"],
            },
        },
        "total": {"type": "integer"},
    },
    "required": ["items", "total"],
}


async def _answer(ctx: OperationContext) -> Any:
    return {"items": [], "total": 0}


def _op(result: Any, name: str = "rows") -> Operation:
    return Operation(name, 1, PARAMS, _answer, result=result)


def test_a_result_names_its_first_difference() -> None:
    op = _op(ROWS)
    assert op.result_problem({"items": [{"id": "a", "n": 1}], "total": 1}) is None
    assert (
        op.result_problem({"items": [{"id": 7}], "total": 1})
        == "result.items[0].id: expected string"
    )
    assert op.result_problem({"items": []}) == "result.total: is required"
    assert op.result_problem([]) == "result: expected object"


def test_without_a_result_schema_nothing_is_a_problem() -> None:
    assert Operation("free", 1, PARAMS, _answer).result_problem(object()) is None


@pytest.mark.parametrize(
    ("result", "message"),
    [
        ({"type": "nonsense"}, "the result schema does not compile"),
        (["not", "a", "schema"], "the result schema must be a JSON Schema object"),
    ],
)
def test_a_result_schema_that_cannot_work_is_refused_when_declared(
    result: Any, message: str
) -> None:
    with pytest.raises(InvalidArgument, match=f"operation 'rows': {message}"):
        _op(result)


def test_openapi_exports_each_result_and_types_the_surface_answer() -> None:
    typed = surface_of(_op(ROWS), _op({"type": "object"}, "other"), id="typed")
    half = surface_of(_op(ROWS), Operation("free", 1, PARAMS, _answer), id="half")
    doc = openapi_document({"typed": typed, "half": half, "probe": probe.SURFACE})
    schemas = doc["components"]["schemas"]
    assert schemas["typed.rows.result"] == ROWS
    # Every operation declares one: the surface's answers name them.
    assert schemas["typed.Answer"]["properties"]["result"]["anyOf"] == [
        {"$ref": "#/components/schemas/typed.rows.result"},
        {"$ref": "#/components/schemas/typed.other.result"},
    ]
    poll = doc["paths"]["/api/typed/q/{jobId}"]["get"]["responses"]["200"]
    assert poll["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/typed.Answer"
    }
    post = doc["paths"]["/api/typed/q"]["post"]
    assert post["responses"]["200"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/typed.Answer"
    }
    variants = post["requestBody"]["content"]["application/json"]["schema"]["oneOf"]
    assert {v["title"]: v["x-dataplane-result"] for v in variants} == {
        "typed.rows": {"$ref": "#/components/schemas/typed.rows.result"},
        "typed.other": {"$ref": "#/components/schemas/typed.other.result"},
    }
    # One operation without: its answers stay untyped, the declared one is still exported.
    assert "half.Answer" not in schemas and "half.rows.result" in schemas
    poll = doc["paths"]["/api/half/q/{jobId}"]["get"]["responses"]["200"]
    assert poll["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/Answer"}


def test_a_typed_answer_accepts_a_real_answer_and_refuses_a_broken_one() -> None:
    """The exported schemas resolve: a probe.echo answer validates against probe.Answer
    through the document's own references, and one with a broken result does not."""
    doc = openapi_document({"probe": probe.SURFACE})
    answer = {"$ref": "#/components/schemas/probe.Answer", "components": doc["components"]}
    check = jsonschema.Draft202012Validator(answer)
    good = {"jobId": "j", "status": "done", "result": {"echo": 1, "client": "acme"}}
    assert not list(check.iter_errors(good))
    broken = {**good, "result": {"echo": 1}}
    assert list(check.iter_errors(broken))
    assert not list(check.iter_errors({"jobId": "j", "status": "poison", "error": {}}))


def test_the_document_of_every_registered_surface_is_openapi_3_1() -> None:
    """With the result schemas in it (probe's, the demo LMS's): the specification's own
    schema accepts it; and the check can fail (a response that is not an object)."""
    surfaces = from_env(SurfacesConfig, probe_enabled=True).registry().surfaces
    doc = openapi_document(surfaces)
    assert any(name.endswith(".result") for name in doc["components"]["schemas"])
    assert not [str(e)[:200] for e in OpenAPIV31SpecValidator(doc).iter_errors()]
    doc["paths"]["/api/probe/q"]["post"]["responses"]["200"] = "not a response"
    assert list(OpenAPIV31SpecValidator(doc).iter_errors())
