"""The project's exception types.

Database driver errors are turned into these at one boundary (``dataplane.db``);
nothing above it catches ``psycopg`` exceptions.
"""

from __future__ import annotations

EXPECTED_HTTP_STATUSES = frozenset({400, 403, 404})


class DataPlaneError(Exception):
    """Base of every error this package raises on purpose."""


class ConfigError(DataPlaneError):
    """The process was configured wrongly (missing or invalid setting)."""


class InvalidArgument(DataPlaneError, ValueError):
    """A public function was given a value it cannot accept."""


class DatabaseError(DataPlaneError):
    """The database refused a statement (constraint, syntax, permission, …)."""

    def __init__(self, message: str, *, sqlstate: str | None = None) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate


class DatabaseUnavailable(DatabaseError):
    """The database could not be reached, the connection dropped, or a call timed out."""


class PoolTimeout(DatabaseUnavailable):
    """No pooled connection became free within the acquire timeout."""


class QueueFull(DataPlaneError):
    """An enqueue refused by backpressure: the queue type has as many live rows as it
    may (``scope == "type"``), or the client its share of them (``scope == "client"``)."""

    def __init__(self, queue_type: str, scope: str) -> None:
        who = "this client's share of" if scope == "client" else "the limit of"
        super().__init__(f"{queue_type} is at {who} live jobs; try again later")
        self.queue_type = queue_type
        self.scope = scope


class LeaseLost(DataPlaneError):
    """A fenced write found the row no longer held by this claim.

    The lease lapsed and another worker re-claimed the row (or it was released):
    the holder must drop its work; the newer claim is untouched.
    """


class HttpError(DataPlaneError):
    """An expected, client-visible error (400/403/404) raised by a handler or a gate.

    A job that raises it completes ``done`` with ``{"error": {"status", "message"}}``:
    an answer, never retried, never a path to poison.
    """

    def __init__(self, status: int, message: str) -> None:
        if status not in EXPECTED_HTTP_STATUSES:
            raise InvalidArgument(
                f"HttpError status must be one of {sorted(EXPECTED_HTTP_STATUSES)}, got {status!r}"
            )
        super().__init__(message)
        self.status = status
        self.message = message

    def to_payload(self) -> dict[str, object]:
        return {"error": {"status": self.status, "message": self.message}}
