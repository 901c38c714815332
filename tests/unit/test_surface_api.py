"""The public surface API: registrations refused with one line, JSON Schema 2020-12
validation (keywords the old hand-written subset ignored), cache tags, versions."""

from __future__ import annotations

from typing import Any

import pytest

import dataplane
from dataplane import Auth, HttpError, Operation, OperationContext, surface
from dataplane.core.errors import ConfigError, InvalidArgument
from dataplane.surfaces.manifest import validate
from dataplane.surfaces.registry import load_registry

FIXTURES = "tests.unit.surface_fixtures"
CALLER = Auth(client="acme", user_id="u7", actor_email="", staff=True, branches=("*",))


async def handler(ctx: OperationContext) -> Any:
    return ctx.params


def test_the_public_api_is_the_package_root() -> None:
    for name in dataplane.__all__:
        assert getattr(dataplane, name) is not None
    assert "Operation" in dataplane.__all__ and "SurfacePackage" in dataplane.__all__


def test_a_good_entry_loads_with_its_origin() -> None:
    registry = load_registry(probe_enabled=True, modules=f"{FIXTURES}:GOOD")
    assert set(registry.surfaces) == {"probe", "good"}
    assert registry.entries["good"].origin == f"{FIXTURES}:GOOD (DATAPLANE_SURFACES)"


@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        (f"{FIXTURES}:GOOD,{FIXTURES}:TWIN", "surface id 'good' is already registered by"),
        (f"{FIXTURES}.unknown_gate:SURFACE", "unknown gate 'wizard'"),
        (f"{FIXTURES}.bad_schema:SURFACE", "the parameter schema does not compile"),
        (f"{FIXTURES}.sync_handler:SURFACE", "the handler must be an async function"),
        (f"{FIXTURES}:NOT_A_SURFACE", "is not a Surface"),
        ("tests.unit.no_such_module:X", "cannot load it"),
        ("not-a-spec", "must look like pkg.module:attr"),
    ],
)
def test_bad_registrations_are_refused_with_one_line(entry: str, problem: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_registry(probe_enabled=False, modules=entry)
    message = str(info.value)
    assert "\n" not in message and problem in message
    if ":" in entry and "no_such" not in entry and entry != "not-a-spec":
        assert entry.split(",")[-1] in message  # names the entry


def test_declarations_that_cannot_work_are_refused() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    with pytest.raises(InvalidArgument, match="unknown gate"):
        Operation("get", 1, schema, handler, gates=("nope",))
    with pytest.raises(InvalidArgument, match=r"reads params\.branch"):
        Operation("get", 1, schema, handler, gates=("branch-in-scope:branch",))
    with pytest.raises(InvalidArgument, match="does not compile"):
        Operation("get", 1, {"type": "object", "minProperties": "x"}, handler)
    with pytest.raises(InvalidArgument, match="declared twice"):
        surface(Operation("get", 1, schema, handler), Operation("get", 1, schema, handler), id="x")
    with pytest.raises(InvalidArgument, match="user_param"):
        Operation("get", 1, schema, handler, user_param="userId")


@pytest.mark.parametrize(
    ("schema", "good", "bad"),
    [
        ({"type": "string", "pattern": "^[a-z]+$"}, "abc", "abc\n"),  # full match: no newline
        ({"type": "string", "format": "email"}, "a@b.example", "not-an-email"),
        ({"type": "string", "format": "date"}, "2026-12-01", "2026-13-45"),
        ({"oneOf": [{"type": "integer"}, {"type": "string"}]}, 3, [3]),
        ({"type": "integer", "multipleOf": 5}, 10, 12),
        ({"type": "array", "uniqueItems": True}, [1, 2], [1, 1]),
        ({"not": {"const": "root"}}, "user", "root"),
    ],
)
def test_keywords_the_old_subset_ignored_are_enforced(schema: Any, good: Any, bad: Any) -> None:
    wrapped = {"type": "object", "properties": {"v": schema}}
    assert validate(wrapped, {"v": good}) == {"v": good}
    with pytest.raises(HttpError) as info:
        validate(wrapped, {"v": bad})
    assert info.value.status == 400 and "params.v" in info.value.message


def test_cache_tags_follow_who_the_result_is_about() -> None:
    schema = {"type": "object", "properties": {"learner": {"type": "string"}}}
    about_param = Operation("get", 1, schema, handler, ttl_seconds=5, user_param="learner")
    about_caller = Operation("me", 1, schema, handler, ttl_seconds=5, per_user=True)
    # u:<user> for a service's invalidation (every client), c:<client>|u:<user> for a
    # staff caller's (its own client only).
    assert about_param.cache_tags(CALLER, {"learner": "L1"}) == ["c:acme", "u:L1", "c:acme|u:L1"]
    assert about_caller.cache_tags(CALLER, {}) == ["c:acme", "u:u7", "c:acme|u:u7"]


def test_every_declared_version_is_served() -> None:
    schema = {"type": "object"}
    s = surface(
        Operation("get", 1, schema, handler), Operation("get", 2, schema, handler), id="vers"
    )
    assert s.operation("get").version == 2  # what a BFF enqueues
    assert s.operation("get", 1).version == 1  # what a worker still serves
    with pytest.raises(HttpError) as info:
        s.operation("get", 3)
    assert info.value.status == 400 and "[1, 2]" in info.value.message


@pytest.mark.parametrize(
    ("bad", "problem"),
    [
        ("x" * 43, "is 43 characters; at most 42 fit"),
        ("a" + "b" * 59, "63-byte identifier limit"),
        ("orders_dev", "may not end in '_dev'"),
        ("Orders", "lower-case letters, digits and _"),
        ("9lives", "starting with a letter"),
        ("", "lower-case letters"),
    ],
)
def test_a_surface_id_that_cannot_name_its_queues_is_refused_at_declaration(
    bad: str, problem: str
) -> None:
    op = Operation("get", 1, {"type": "object"}, handler)
    with pytest.raises(InvalidArgument) as info:
        surface(op, id=bad)
    assert problem in str(info.value) and "\n" not in str(info.value)
    longest = surface(op, id="x" * 42)  # the longest that fits: every tier's names do
    for suffix in ("", "-dev"):
        qt = longest.queue_type(suffix)
        names = (qt.name, qt.done_channel, qt.wake_channel, qt.progress_channel, qt.cancel_channel)
        assert max(len(n.encode()) for n in names) <= 63
    assert len(longest.queue_type("-dev").wake_channel) == 63


def test_a_package_declaring_a_bad_id_is_refused_when_loaded_with_one_line() -> None:
    with pytest.raises(ConfigError) as info:
        load_registry(probe_enabled=False, modules=f"{FIXTURES}.long_id:SURFACE")
    message = str(info.value)
    assert "\n" not in message and f"{FIXTURES}.long_id:SURFACE" in message
    assert "at most 42 fit" in message
