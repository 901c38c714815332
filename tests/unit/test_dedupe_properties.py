"""Hypothesis over canonicalisation and dedupe keys: equal params in any key
order give one key; any difference in client, scope, operation, version or
params gives another."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from dataplane.queue.envelope import canonical_json, dedupe_key, scope_key

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**53), max_value=2**53),
    st.text(max_size=20),
)
json_values = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)
params_st = st.dictionaries(st.text(max_size=8), json_values, max_size=6)
names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz", min_size=1, max_size=8)
branches = st.lists(st.text(alphabet="abcdefgh-", min_size=1, max_size=6), max_size=4)


def _shuffled(value: Any, seed: int) -> Any:
    """The same JSON value with every object's keys in another order."""
    if isinstance(value, dict):
        items = list(value.items())
        k = seed % (len(items) or 1)
        items = items[k:] + items[:k]
        items.reverse()
        return {key: _shuffled(v, seed + 1) for key, v in items}
    if isinstance(value, list):
        return [_shuffled(v, seed + 1) for v in value]
    return value


@settings(max_examples=300, deadline=None)
@given(params_st, st.integers(min_value=0, max_value=100))
def test_key_order_never_matters(params: dict[str, Any], seed: int) -> None:
    shuffled = _shuffled(params, seed)
    assert shuffled == params
    assert canonical_json(shuffled) == canonical_json(params)
    scope = scope_key(["a"], False)
    assert dedupe_key("s", "op", 1, "c", scope, shuffled) == dedupe_key(
        "s", "op", 1, "c", scope, params
    )
    assert json.loads(canonical_json(params)) == params


@settings(max_examples=300, deadline=None)
@given(
    names,
    names,
    st.integers(1, 5),
    names,
    branches,
    st.booleans(),
    params_st,
    st.sampled_from(["surface", "operation", "version", "client", "branches", "staff", "params"]),
    names,
    params_st,
)
def test_any_difference_changes_the_key(
    surface: str,
    op: str,
    version: int,
    client: str,
    br: list[str],
    staff: bool,
    params: dict[str, Any],
    which: str,
    other_name: str,
    other_params: dict[str, Any],
) -> None:
    base = dict(
        surface=surface, op=op, version=version, client=client, br=br, staff=staff, params=params
    )
    changed = dict(base)
    if which == "surface":
        changed["surface"] = surface + other_name
    elif which == "operation":
        changed["op"] = op + other_name
    elif which == "version":
        changed["version"] = version + 1
    elif which == "client":
        changed["client"] = client + other_name
    elif which == "branches":
        changed["br"] = [*br, "zz" + other_name]
    elif which == "staff":
        changed["staff"] = not staff
    else:
        changed["params"] = {**params, "__x": other_params}

    def key(d: dict[str, Any]) -> str:
        return dedupe_key(
            d["surface"],
            d["op"],
            d["version"],
            d["client"],
            scope_key(d["br"], d["staff"]),
            d["params"],
        )

    assert key(base) != key(changed)
