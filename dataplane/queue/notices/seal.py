"""Sealed answers: a done notify's small answer, encrypted and authenticated.

``LISTEN`` and ``NOTIFY`` need no privilege in Postgres: any role that may connect to
the queue database hears every done channel and may send on it. A done notify that
carries a job's answer must therefore be unreadable to a listener and unforgeable by
a sender. The worker seals the answer with a key only workers and BFFs hold
(``DATAPLANE_NOTIFY_SECRET``); a BFF opens it, and delivers the answer without reading
the row, only when it opens. Anything else (another format, a wrong key, a changed
byte, another job's sealed answer) fails to open: the BFF reads the row instead, and
counts it.

Format of the sealed part (after ``'<job id> '``)::

    base64url( kid[4] | salt[16] | nonce[12] | AES-256-GCM(message key, nonce, note,
                                                           aad="done|<job id>") )

* ``kid`` names the secret (its SHA-256, four bytes): several secrets may be set, comma
  separated, for a rotation; the first seals, every one opens.
* ``salt`` is random per sealing :class:`NotifySeal` (one per worker process); the
  message key is ``HMAC-SHA256(secret key, "dataplane-notify-key|" + salt)``, so every
  worker process seals under a key of its own.
* ``nonce`` is that process's counter: never repeated under one message key, however
  many answers a process seals (random 96-bit nonces under one long-lived key would
  reach GCM's collision bound after about 2^32 answers).
* the associated data binds the sealed note to the job id in front of it: a sealed
  answer moved to another job does not open.

Progress notes (``<type>_progress``, :mod:`dataplane.queue.notices.progress`) are sealed the
same way with the associated data ``"progress|<job id>"``: a done answer does not open
as a progress note, nor a progress note as an answer.

Invalidations (``dataplane_invalidate``, one tag a notify) are sealed the same way,
with the associated data ``"invalidate"`` (no job id is that) and the note
``{"tag": ..., "at": <unix seconds>}``: a worker drops cache entries only for a tag
that opens and was sealed within :data:`INVALIDATION_MAX_AGE` seconds (a captured one
replays for that long at most), so a role that may merely connect cannot drop a
tenant's cache on every worker.

A BFF keeps the message keys it has derived (one per worker process it has heard
from), bounded; a flood of made-up salts costs one HMAC each and evicts old keys.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import itertools
import json
import os
import time
from collections import OrderedDict

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from dataplane.core.errors import InvalidArgument

MIN_SECRET_CHARS = 32  # characters of each DATAPLANE_NOTIFY_SECRET
KID_BYTES = 4
SALT_BYTES = 16
NONCE_BYTES = 12
TAG_BYTES = 16
HEADER_BYTES = KID_BYTES + SALT_BYTES + NONCE_BYTES
MESSAGE_KEYS = 1024  # message keys a BFF keeps (one per worker process heard)
INVALIDATION_MAX_AGE = 300.0  # seconds a sealed invalidation opens for (clocks may skew)
INVALIDATION_AAD = "invalidate"  # the associated data of a sealed invalidation


def parse_secrets(value: str | None) -> list[str]:
    """The secrets of ``DATAPLANE_NOTIFY_SECRET`` (comma separated; empty when unset);
    :class:`InvalidArgument` when one is too short to be a key."""
    secrets = [s.strip() for s in (value or "").split(",") if s.strip()]
    for secret in secrets:
        if len(secret) < MIN_SECRET_CHARS:
            raise InvalidArgument(
                f"notify_secret: each secret must be at least {MIN_SECRET_CHARS} characters"
            )
    return secrets


def _secret_key(secret: str) -> bytes:
    return hashlib.sha256(b"dataplane-notify|" + secret.encode()).digest()


def _kid(key: bytes) -> bytes:
    return hashlib.sha256(b"dataplane-notify-kid|" + key).digest()[:KID_BYTES]


def _message_key(key: bytes, salt: bytes) -> AESGCM:
    return AESGCM(hmac.new(key, b"dataplane-notify-key|" + salt, hashlib.sha256).digest())


def _aad(job_id: str, kind: str = "done") -> bytes:
    return f"{kind}|{job_id}".encode()


class NotifySeal:
    """Seals answers (:meth:`seal`, the worker) and opens them (:meth:`open`, the BFF)."""

    def __init__(self, secrets: list[str]) -> None:
        if not secrets:
            raise InvalidArgument("a NotifySeal needs at least one secret")
        keys = [_secret_key(s) for s in secrets]
        self._keys = {_kid(k): k for k in keys}
        self._kid = _kid(keys[0])
        self._salt = os.urandom(SALT_BYTES)
        self._sealer = _message_key(keys[0], self._salt)
        self._counter = itertools.count(1)
        self._opened: OrderedDict[bytes, AESGCM] = OrderedDict()

    @property
    def key_id(self) -> str:
        """The key id (hex) this seal seals with: its first secret's."""
        return self._kid.hex()

    @property
    def key_ids(self) -> tuple[str, ...]:
        """The key ids (hex) of every secret this seal opens with. A key id names a
        secret without revealing it: every sealed notify carries it in clear."""
        return tuple(kid.hex() for kid in self._keys)

    @classmethod
    def from_setting(cls, value: str | None) -> NotifySeal | None:
        """From ``DATAPLANE_NOTIFY_SECRET`` (comma-separated secrets); None when unset."""
        secrets = parse_secrets(value)
        return cls(secrets) if secrets else None

    def seal(self, job_id: str, note: str, *, kind: str = "done") -> str:
        """The sealed text of ``note`` (the answer's JSON) for job ``job_id``; ``kind``
        ``"progress"`` for a progress note (one never opens as the other)."""
        nonce = next(self._counter).to_bytes(NONCE_BYTES, "big")
        sealed = self._sealer.encrypt(nonce, note.encode(), _aad(job_id, kind))
        header = self._kid + self._salt + nonce
        return base64.urlsafe_b64encode(header + sealed).rstrip(b"=").decode("ascii")

    def open(self, job_id: str, text: str, *, kind: str = "done") -> str | None:
        """The note sealed in ``text`` for ``job_id`` (as ``kind``); None unless it opens."""
        try:
            raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        except (binascii.Error, ValueError):
            return None
        if len(raw) < HEADER_BYTES + TAG_BYTES:
            return None
        key = self._keys.get(raw[:KID_BYTES])
        if key is None:
            return None
        header, sealed = raw[:HEADER_BYTES], raw[HEADER_BYTES:]
        cipher = self._message_cipher(key, header[: KID_BYTES + SALT_BYTES])
        try:
            plain = cipher.decrypt(header[KID_BYTES + SALT_BYTES :], sealed, _aad(job_id, kind))
            return plain.decode()
        except (InvalidTag, UnicodeDecodeError):
            return None

    def seal_invalidation(self, tag: str, *, now: float | None = None) -> str:
        """The sealed payload of an invalidation of ``tag``."""
        note = json.dumps({"tag": tag, "at": time.time() if now is None else now})
        return self.seal(INVALIDATION_AAD, note)

    def open_invalidation(self, text: str, *, now: float | None = None) -> str | None:
        """The tag sealed in ``text``; None unless it opens, is well formed and was
        sealed within :data:`INVALIDATION_MAX_AGE` seconds of ``now``."""
        note = self.open(INVALIDATION_AAD, text)
        if note is None:
            return None
        try:
            value = json.loads(note)
            tag, at = value["tag"], float(value["at"])
        except (ValueError, TypeError, KeyError):
            return None
        if not isinstance(tag, str):
            return None
        age = (time.time() if now is None else now) - at
        return tag if -INVALIDATION_MAX_AGE <= age <= INVALIDATION_MAX_AGE else None

    def _message_cipher(self, key: bytes, kid_salt: bytes) -> AESGCM:
        cipher = self._opened.get(kid_salt)
        if cipher is None:
            cipher = self._opened[kid_salt] = _message_key(key, kid_salt[KID_BYTES:])
            if len(self._opened) > MESSAGE_KEYS:
                self._opened.popitem(last=False)
        else:
            self._opened.move_to_end(kid_salt)
        return cipher
