"""How callers' tokens are verified (read by :func:`dataplane.core.settings.from_env`):
the BFF's and the console's alike."""

from __future__ import annotations

from dataclasses import dataclass

from dataplane.core.settings import setting

JWKS_REFRESH_SECONDS = 60.0  # an unknown kid fetches the JWKS at most once per this
JWKS_MAX_AGE_SECONDS = 3600.0  # cached JWKS keys are re-fetched once older than this
JWKS_TIMEOUT_SECONDS = 5.0  # one JWKS fetch, connect to last byte


@dataclass(frozen=True, slots=True)
class JwtConfig:
    """How callers' tokens are verified, and the key of the stream/poll/blob URL tokens."""

    secret: str | None = setting("DATAPLANE_JWT_SECRET", None)
    public_key: str | None = setting("DATAPLANE_JWT_PUBLIC_KEY", None)
    audience: str | None = setting("DATAPLANE_JWT_AUDIENCE", None)
    issuer: str | None = setting("DATAPLANE_JWT_ISSUER", None)
    stream_secret: str | None = setting("DATAPLANE_STREAM_SECRET", None)
    # An identity provider's keys (instead of a secret or one public key).
    jwks_url: str | None = setting("DATAPLANE_JWT_JWKS_URL", None)
    jwks_refresh_seconds: float = setting(
        "DATAPLANE_JWT_JWKS_REFRESH_SECONDS", JWKS_REFRESH_SECONDS, minimum=0.0
    )
    jwks_max_age_seconds: float = setting(
        "DATAPLANE_JWT_JWKS_MAX_AGE_SECONDS", JWKS_MAX_AGE_SECONDS, minimum=1.0
    )
    jwks_timeout_seconds: float = setting(
        "DATAPLANE_JWT_JWKS_TIMEOUT_SECONDS", JWKS_TIMEOUT_SECONDS, minimum=0.1
    )

    @property
    def configured(self) -> bool:
        return bool(self.secret or self.public_key or self.jwks_url)
