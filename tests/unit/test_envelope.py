"""Canonical JSON, scope keys and dedupe keys."""

from __future__ import annotations

import pytest

from dataplane.core.errors import InvalidArgument
from dataplane.queue.envelope import Auth, Envelope, canonical_json, dedupe_key, scope_key


def test_canonical_json_is_sorted_compact_utf8() -> None:
    assert canonical_json({"b": 1, "a": [1, {"d": "é", "c": None}]}) == (
        '{"a":[1,{"c":null,"d":"é"}],"b":1}'
    )
    with pytest.raises(InvalidArgument):
        canonical_json({"x": float("inf")})


def test_scope_key_depends_on_the_set_of_branches_and_staff() -> None:
    assert scope_key(["b", "a"], False) == scope_key(["a", "b", "a"], False)
    assert scope_key(["a"], False) != scope_key(["a"], True)
    assert scope_key(["a"], False) != scope_key(["a", "b"], False)


def test_dedupe_key_is_order_insensitive_and_sensitive_to_everything_else() -> None:
    base = ("users", "list", 1, "acme", scope_key(["a"], False))
    key = dedupe_key(*base, {"x": 1, "y": [1, 2]})
    assert key == dedupe_key(*base, {"y": [1, 2], "x": 1})
    variants = [
        ("users", "list", 1, "acme", scope_key(["a"], False), {"x": 1, "y": [2, 1]}),
        ("users", "list", 1, "acme", scope_key(["a"], True), {"x": 1, "y": [1, 2]}),
        ("users", "list", 1, "globex", scope_key(["a"], False), {"x": 1, "y": [1, 2]}),
        ("users", "list", 2, "acme", scope_key(["a"], False), {"x": 1, "y": [1, 2]}),
        ("users", "detail", 1, "acme", scope_key(["a"], False), {"x": 1, "y": [1, 2]}),
        ("skills", "list", 1, "acme", scope_key(["a"], False), {"x": 1, "y": [1, 2]}),
    ]
    assert len({key} | {dedupe_key(*v) for v in variants}) == len(variants) + 1  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        dedupe_key("a|b", "list", 1, "acme", "k", {})


def test_envelope_round_trips_and_rejects_a_forged_scope_key() -> None:
    auth = Auth("acme", "7", "x@acme.test", False, ("acme-north", "acme-east"))
    env = Envelope("users", "list", 1, {"limit": 5}, auth, "00-abc-def-01")
    again = Envelope.from_json(env.to_json())
    assert again == env and again.dedupe_key == env.dedupe_key
    forged = env.to_json()
    forged["auth"]["scopeKey"] = scope_key(["*"], True)
    with pytest.raises(InvalidArgument):
        Envelope.from_json(forged)
    for broken in ({}, {"surface": 1}, {**env.to_json(), "params": []}):
        with pytest.raises(InvalidArgument):
            Envelope.from_json(broken)


def test_a_per_user_key_names_the_caller_and_other_keys_stay_as_they_were() -> None:
    base = ("probe", "cached", 1, "acme", scope_key(["a"], False), {"value": 1})
    shared = dedupe_key(*base)
    alice, bob = dedupe_key(*base, user="alice"), dedupe_key(*base, user="bob")
    assert len({shared, alice, bob}) == 3
    assert dedupe_key(*base, user="alice") == alice
    assert dedupe_key(*base, "-dev", user="alice") not in (alice, dedupe_key(*base, "-dev"))
    # A user id cannot pose as the tier, nor the tier as a user id.
    assert dedupe_key(*base, user="-dev") != dedupe_key(*base, "-dev")

    def env(user: str, per_user: bool) -> Envelope:
        auth = Auth("acme", user, "", False, ("a",))
        return Envelope("probe", "cached", 1, {"value": 1}, auth, per_user=per_user)

    assert env("alice", False).dedupe_key == env("bob", False).dedupe_key == shared
    assert env("alice", True).dedupe_key == alice and env("bob", True).dedupe_key == bob
    again = Envelope.from_json(env("alice", True).to_json())
    assert again.per_user and again.dedupe_key == alice
    broken = {**env("alice", True).to_json(), "perUser": "yes"}
    with pytest.raises(InvalidArgument):
        Envelope.from_json(broken)
