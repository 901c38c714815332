"""Reading jobs at the edge: owner-filtered reads and blobs streamed in chunks.

* Another tenant's job id answers exactly like a random id (same 404 body) on poll,
  stream and blob, and the BFF's read statement returns no row for it.
* A large blob downloads byte-identical, read from Postgres in bounded chunks; an
  expired or deleted blob still answers the JSON 404.
"""

from __future__ import annotations

import hashlib
import math
import uuid
from collections.abc import Callable
from typing import Any

import httpx

from dataplane.db import Database
from dataplane.queue.blobs import BLOB_CHUNK_BYTES, blob_statistics
from tests.acceptance.test_bff import STAFF, poll_until_done, post
from tests.helpers import bearer, token

OTHER_TENANT = token("globex", staff=True, sub="intruder")
OTHER_SCOPE = token("acme", sub="n2", branches=["acme-south"])  # same client, other scope
NOT_FOUND = {"error": {"status": 404, "code": "NOT_FOUND", "message": "no such job"}}


async def test_another_tenants_job_answers_like_a_random_id(http: httpx.AsyncClient) -> None:
    resp = await post(http, "probe", "echo", {"value": "secret"}, STAFF)
    assert resp.status_code == 202, resp.text
    job_id = resp.json()["jobId"]
    random_id = str(uuid.uuid4())
    for suffix in ("", "/stream", "/blob"):
        for tok in (OTHER_TENANT, OTHER_SCOPE):
            theirs = await http.get(f"/api/probe/q/{job_id}{suffix}", headers=bearer(tok))
            unknown = await http.get(f"/api/probe/q/{random_id}{suffix}", headers=bearer(tok))
            assert theirs.status_code == unknown.status_code == 404, (suffix, theirs.text)
            assert theirs.json() == unknown.json() == NOT_FOUND
            assert theirs.headers["content-type"] == unknown.headers["content-type"]
    mine = await http.get(f"/api/probe/q/{job_id}", headers=bearer(STAFF))
    assert mine.status_code == 202  # the owner still reads it (pending: no worker)


async def test_a_large_blob_streams_byte_identical_in_bounded_chunks(
    http: httpx.AsyncClient, spawn_worker: Callable[..., Any], db: Database
) -> None:
    await spawn_worker()
    size = 3 * 1024 * 1024
    body = (await post(http, "probe", "large", {"bytes": size})).json()
    ref = (await poll_until_done(http, body["pollUrl"], within=60))["blobRef"]
    stored = await db.fetchone(
        "SELECT size, sha256(data) AS digest FROM surface_result_blobs WHERE job_id = %(id)s",
        {"id": uuid.UUID(body["jobId"])},
    )
    assert stored is not None and stored["size"] == ref["size"] > size
    before = blob_statistics()
    digest = hashlib.sha256()
    received = 0
    async with http.stream("GET", ref["url"]) as resp:
        assert resp.status_code == 200
        assert resp.headers["content-type"].startswith("application/json")
        assert int(resp.headers["content-length"]) == ref["size"]
        async for part in resp.aiter_bytes():
            digest.update(part)
            received += len(part)
    after = blob_statistics()
    assert received == ref["size"]
    assert digest.digest() == bytes(stored["digest"])
    assert after.chunks - before.chunks == math.ceil(ref["size"] / BLOB_CHUNK_BYTES) > 1
    assert after.bytes - before.bytes == ref["size"]
    assert after.largest_chunk <= BLOB_CHUNK_BYTES


async def test_an_expired_or_deleted_blob_answers_the_json_404(
    http: httpx.AsyncClient, spawn_worker: Callable[..., Any], db: Database
) -> None:
    await spawn_worker()
    gone = {
        "error": {
            "status": 404,
            "code": "NOT_FOUND",
            "message": "no blob for this job (it may have expired)",
        }
    }
    urls = []
    for n in (300_000, 300_001):
        body = (await post(http, "probe", "large", {"bytes": n})).json()
        urls.append((body["jobId"], (await poll_until_done(http, body["pollUrl"]))["blobRef"]))
    (expired_id, expired), (deleted_id, deleted) = urls
    await db.execute(
        "UPDATE surface_result_blobs SET expires_at = now() - interval '1 second' "
        "WHERE job_id = %(id)s",
        {"id": uuid.UUID(expired_id)},
    )
    await db.execute(
        "DELETE FROM surface_result_blobs WHERE job_id = %(id)s", {"id": uuid.UUID(deleted_id)}
    )
    for ref in (expired, deleted):
        resp = await http.get(ref["url"])
        assert resp.status_code == 404
        assert resp.headers["content-type"] == "application/json"
        assert resp.json() == gone
