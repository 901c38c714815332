"""The BFF's OpenAPI 3.1 document, ``GET /openapi.json`` and ``dataplane openapi``.

* :mod:`.document`: every route and every operation's parameter and result schema,
  generated from the manifest (:func:`openapi_document`);
* :mod:`.schemas`: the bodies every surface's routes share (an error, a queued job, a
  live one with its progress and retry, a withdrawal, an answer, a cancellation);
* :mod:`.edge`: the statuses the HTTP edge answers on every route (a needless escape in
  a path, a slow body, a header too large);
* :mod:`.invalidate`: the invalidation route's entry;
* :mod:`.command`: ``dataplane openapi``, the document written to a file or stdout.
"""

from dataplane.bff.openapi.document import openapi_document

__all__ = ["openapi_document"]
