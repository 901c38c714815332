"""Claims as text, and which keys of a JWKS document are usable (no I/O)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from hypothesis import given, settings
from hypothesis import strategies as st
from jwt.algorithms import RSAAlgorithm

from dataplane.auth.claims import NOT_TEXT, AuthError, auth_from_claims, claims_are_text
from dataplane.auth.jwks import JWKS_ALGORITHMS, usable_keys
from dataplane.auth.verifier import JwtVerifier
from dataplane.core.errors import ConfigError
from dataplane.http import ends_response

GOOD = {"sub": "u1", "client": "acme", "staff": False, "branches": ["acme-north"]}


@pytest.mark.parametrize(
    "claims",
    [
        {**GOOD, "client": "\ud800"},
        {**GOOD, "sub": "a\x00"},
        {**GOOD, "branches": ["ok", "\udfff"]},
        {**GOOD, "email": "x\x00@y"},
        {**GOOD, "nested": {"deep": ["\ud83d"]}},
        {**GOOD, "\udc80": 1},
    ],
)
def test_claims_that_are_not_text_are_refused_with_one_message(claims: dict[str, object]) -> None:
    assert not claims_are_text(claims)
    with pytest.raises(AuthError) as caught:
        auth_from_claims(claims)
    assert str(caught.value) == NOT_TEXT


def test_text_claims_pass_including_astral_characters() -> None:
    claims = {**GOOD, "client": "acmé 🚀", "email": "名前@example.jp"}
    assert claims_are_text(claims)
    assert auth_from_claims(claims).client == "acmé 🚀"


def test_only_asymmetric_signing_keys_with_a_kid_are_usable() -> None:
    public = rsa.generate_private_key(public_exponent=65537, key_size=2048).public_key()
    rsa_jwk = json.loads(RSAAlgorithm.to_jwk(public))
    document = {
        "keys": [
            {**rsa_jwk, "kid": "sig", "use": "sig"},
            {**rsa_jwk, "kid": "enc", "use": "enc"},
            {**rsa_jwk},  # no kid
            {"kty": "oct", "kid": "hmac", "k": "c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0LXNlY3JldA"},
            {"kty": "nonsense", "kid": "odd"},
            "not a key",
        ]
    }
    keys, skipped = usable_keys(document)
    assert set(keys) == {"sig"} and keys["sig"].algorithm_name == "RS256"
    assert len(skipped) == 3  # no kid, an unknown key type, not an object (enc, oct: quietly)
    with pytest.raises(ValueError):
        usable_keys({"no": "keys"})


RSA_JWK = json.loads(
    RSAAlgorithm.to_jwk(rsa.generate_private_key(public_exponent=65537, key_size=2048).public_key())
)


@pytest.mark.parametrize(
    ("entry", "why"),
    [
        ({**RSA_JWK, "kid": "odd", "alg": ["RS256"]}, "'alg' ['RS256'] is not one of"),
        ({**RSA_JWK, "kid": "odd", "alg": "none"}, "'alg' 'none' is not one of"),
        ({**RSA_JWK, "kid": "odd", "alg": "HS256"}, "'alg' 'HS256' is not one of"),
        ({**RSA_JWK, "kid": "odd", "alg": {"x": 1}}, "is not one of"),
        ({**RSA_JWK, "kid": "odd", "alg": "ES256"}, "not a usable key"),  # an RSA key
        ({**RSA_JWK, "kid": "odd", "kty": ["RSA"]}, "'kty' ['RSA'] is not a key type"),
        ({**RSA_JWK, "kid": "odd", "n": 5}, "not a usable key"),
        ({**RSA_JWK, "kid": ["odd"]}, "no 'kid'"),
    ],
)
def test_one_bad_entry_is_skipped_and_the_good_keys_kept(entry: dict[str, Any], why: str) -> None:
    good = {**RSA_JWK, "kid": "good", "alg": "RS256"}
    keys, skipped = usable_keys({"keys": [entry, good]})
    assert set(keys) == {"good"}
    assert len(skipped) == 1 and skipped[0].startswith("keys[0]") and why in skipped[0]


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner),
    max_leaves=8,
)
FIELDS = st.sampled_from(["kty", "kid", "alg", "use", "crv", "x", "y", "n", "e", "key_ops"])
PLAUSIBLE = st.sampled_from(["RSA", "EC", "OKP", "oct", "none", "RS256", "ES256", "P-256", "AQAB"])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.dictionaries(FIELDS, JSON | PLAUSIBLE, max_size=6) | JSON, max_size=4))
def test_no_entry_can_cost_the_document_its_good_key(entries: list[Any]) -> None:
    good = {**RSA_JWK, "kid": "good", "alg": "RS256"}
    for where in (0, len(entries)):
        keys, _skipped = usable_keys({"keys": [*entries[:where], good, *entries[where:]]})
        assert "good" in keys
        assert all(key.algorithm_name in JWKS_ALGORITHMS for key in keys.values())


def test_one_source_of_keys_only() -> None:
    with pytest.raises(ConfigError):
        JwtVerifier.from_settings(secret="s" * 32, public_key=None, jwks_url="https://idp/jwks")
    with pytest.raises(ConfigError):
        JwtVerifier.from_settings(secret=None, public_key=None, jwks_url="ftp://idp/jwks")
    verifier = JwtVerifier.from_settings(secret=None, public_key=None, jwks_url="https://i/j")
    assert verifier.jwks is not None and verifier.key is None


def test_the_message_that_ends_a_response() -> None:
    assert ends_response({"type": "http.response.body", "body": b"x"})
    assert ends_response({"type": "http.response.body", "more_body": False})
    assert not ends_response({"type": "http.response.body", "more_body": True})
    assert not ends_response({"type": "http.response.start", "status": 200})
    assert ends_response({"type": "http.response.trailers", "more_trailers": False})


def test_claims_verify_as_verify_does_without_the_envelope_s_claims() -> None:
    import jwt as pyjwt

    from dataplane.auth.claims import mint_token

    secret = "s" * 32
    verifier = JwtVerifier.from_settings(secret=secret, public_key=None)
    tok = mint_token(secret, client="acme", sub="ops", roles=["dataplane:viewer"])
    assert verifier.claims(tok)["roles"] == ["dataplane:viewer"]
    bare = pyjwt.encode({"sub": "ops", "exp": 2**31, "roles": []}, secret, algorithm="HS256")
    assert verifier.claims(bare)["sub"] == "ops"  # no client, staff or branches needed
    with pytest.raises(AuthError):
        verifier.verify(bare)  # the BFF's envelope still needs them
    for bad in (
        pyjwt.encode({"sub": "ops", "exp": 2**31}, "x" * 32, algorithm="HS256"),
        pyjwt.encode({"sub": "ops"}, secret, algorithm="HS256"),
        pyjwt.encode({"sub": "o\x00ps", "exp": 2**31}, secret, algorithm="HS256"),
    ):
        with pytest.raises(AuthError):
            verifier.claims(bad)
