"""The BFF's URL layout: the one place that knows where a job's routes live.

The worker stores a blob's reference without a URL; the BFF adds it when it
answers (:func:`blob_url`), with a token bound to the caller.
"""

from __future__ import annotations

API_PREFIX = "/api"


def job_path(surface: str, job_id: str) -> str:
    return f"{API_PREFIX}/{surface}/q/{job_id}"


def poll_url(surface: str, job_id: str, token: str) -> str:
    return f"{job_path(surface, job_id)}?token={token}"


def stream_url(surface: str, job_id: str, token: str) -> str:
    return f"{job_path(surface, job_id)}/stream?token={token}"


def blob_url(surface: str, job_id: str, token: str) -> str:
    return f"{job_path(surface, job_id)}/blob?token={token}"
