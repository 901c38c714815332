"""Claims that are not text: one 401, never a 5xx."""

from __future__ import annotations

from typing import Any

import httpx

from dataplane.auth.claims import NOT_TEXT
from tests.acceptance.test_edge_claims import BAD_TEXT, base_claims, request_of, signed
from tests.helpers import bearer


async def post_echo(http: httpx.AsyncClient, tok: str, body: Any = None) -> httpx.Response:
    return await http.post("/api/probe/q", **request_of(tok, body))


async def test_claims_that_are_not_text_answer_one_401(http: httpx.AsyncClient) -> None:
    for bad in BAD_TEXT:
        for claims in (
            base_claims(client=bad),
            base_claims(sub=bad),
            base_claims(email=bad),
            base_claims(branches=["acme-north", bad]),
            base_claims(nickname={"deep": [bad]}),
            base_claims(**{bad: 1}),
        ):
            resp = await post_echo(http, signed(claims))
            assert resp.status_code == 401, (claims, resp.text)
            assert resp.json() == {
                "error": {"status": 401, "code": "UNAUTHORIZED", "message": NOT_TEXT}
            }
            # The same token on a job read answers the same.
            read = await http.get(
                "/api/probe/q/00000000-0000-4000-8000-000000000000",
                headers=bearer(signed(claims)),
            )
            assert read.status_code == 401 and read.json()["error"]["message"] == NOT_TEXT
