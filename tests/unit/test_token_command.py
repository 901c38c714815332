"""``dataplane token``: a development JWT, with console roles when asked for."""

from __future__ import annotations

import os
import subprocess
import sys

import jwt

SECRET = "a-development-secret-long-enough-for-hs256-xx"


def _mint(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DATAPLANE_JWT_SECRET": SECRET}
    for key in ("DATAPLANE_JWT_AUDIENCE", "DATAPLANE_JWT_ISSUER"):
        env.pop(key, None)
    return subprocess.run(
        [sys.executable, "-m", "dataplane", "token", *args],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def test_a_token_carries_the_roles_asked_for_and_no_others() -> None:
    done = _mint("--client", "acme", "--sub", "ops", "--role", "dataplane:operator")
    assert done.returncode == 0, done.stderr
    claims = jwt.decode(done.stdout.strip(), SECRET, algorithms=["HS256"])
    assert claims["roles"] == ["dataplane:operator"] and claims["sub"] == "ops"
    plain = jwt.decode(_mint("--client", "acme").stdout.strip(), SECRET, algorithms=["HS256"])
    assert "roles" not in plain
    refused = _mint("--client", "acme", "--role", "admin")
    assert refused.returncode == 2 and "invalid choice" in refused.stderr
