"""One normal form for a request's path: percent-escapes only where they are needed.

Hypercorn decodes the path before routing, so ``/%6detrics`` and ``/%2fmetrics`` were
served as ``/metrics``, while a proxy rule on the raw path (compose's HAProxy denies
``path_beg /metrics``) saw neither: encoding let a request past the proxy's rule. A
path that percent-encodes an unreserved character (RFC 3986: letters, digits,
``-._~``, which never need it) or a slash or backslash (which would change the path's
segments) is refused with 400, so the proxy and the app agree on what a path is.
"""

from __future__ import annotations

import re
import string

_ESCAPE = re.compile(rb"%([0-9A-Fa-f]{2})")
NEEDLESS = frozenset((string.ascii_letters + string.digits + "-._~").encode())
SEGMENT_CHANGING = frozenset(b"/\\")


def needless_escape(raw_path: bytes) -> str | None:
    """The first escape of ``raw_path`` that the normal form forbids, else ``None``."""
    for match in _ESCAPE.finditer(raw_path):
        byte = int(match.group(1), 16)
        if byte in NEEDLESS or byte in SEGMENT_CHANGING:
            return match.group(0).decode("ascii")
    return None
