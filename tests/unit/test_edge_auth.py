"""Claims as text, and which keys of a JWKS document are usable (no I/O)."""

from __future__ import annotations

import json

import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

from dataplane.bff.auth import (
    NOT_TEXT,
    AuthError,
    JwtVerifier,
    _usable_keys,
    auth_from_claims,
    claims_are_text,
)
from dataplane.edge import ends_response
from dataplane.errors import ConfigError

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
    keys = _usable_keys(document)
    assert set(keys) == {"sig"} and keys["sig"].algorithm_name == "RS256"
    with pytest.raises(ValueError):
        _usable_keys({"no": "keys"})


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
