"""The HTTP edge shared by the BFF and the capcom receiver (Quart-Trio on Hypercorn).

* :mod:`~dataplane.http.errors`: errors and JSON bodies (:class:`ApiError`,
  :func:`json_response`, :func:`require_bearer`);
* :mod:`~dataplane.http.hooks`: what every app installs (:func:`install_error_handlers`);
* :mod:`~dataplane.http.exchange`: the request observer (:class:`Exchange`: access
  log, server span, duration metric; :func:`server_span`, :func:`note`,
  :func:`cork_next_write`);
* :mod:`~dataplane.http.guard`: the asyncio guard (:class:`RequireTrio`);
* :mod:`~dataplane.http.serve`: serving in this process (:func:`serve_app`,
  :class:`ServeConfig`) and Hypercorn's logs through ours (:class:`EdgeLogger`).

What replaces Hypercorn's and Quart-Trio's internals lives in :mod:`dataplane.compat`
and is installed by the entry points, not here.
"""

from dataplane.http.errors import (
    PROMETHEUS_CONTENT_TYPE,
    UNAVAILABLE_RETRY_AFTER,
    ApiError,
    body_unread,
    json_response,
    prometheus_response,
    require_bearer,
)
from dataplane.http.exchange import (
    Exchange,
    _from_headers,
    cork_next_write,
    current_exchange,
    ends_response,
    note,
    route_template,
    server_span,
)
from dataplane.http.guard import CONTINUE_EXTENSION, RequireTrio, use_final_send
from dataplane.http.hooks import install_error_handlers
from dataplane.http.serve import EdgeLogger, ServeConfig, route_hypercorn_logs, serve_app

__all__ = [
    "CONTINUE_EXTENSION",
    "PROMETHEUS_CONTENT_TYPE",
    "UNAVAILABLE_RETRY_AFTER",
    "ApiError",
    "EdgeLogger",
    "Exchange",
    "RequireTrio",
    "ServeConfig",
    "_from_headers",
    "body_unread",
    "cork_next_write",
    "current_exchange",
    "ends_response",
    "install_error_handlers",
    "json_response",
    "note",
    "prometheus_response",
    "require_bearer",
    "route_hypercorn_logs",
    "route_template",
    "serve_app",
    "server_span",
    "use_final_send",
]
