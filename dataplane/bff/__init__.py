"""The surface BFF (backend for frontend), served by ``hypercorn -k trio dataplane.app:app``.

* :mod:`~dataplane.bff.app`: the Quart-Trio app and its lifespan;
* :mod:`~dataplane.bff.config`: its configuration;
* :mod:`~dataplane.bff.routes`: the routes (enqueue, stream, poll, blob, health, ...);
* :mod:`~dataplane.bff.auth.tokens`: the signed stream tokens (JWTs: :mod:`dataplane.auth`);
* :mod:`~dataplane.bff.jobs`: reading a job for a caller, and a finished job's answer;
* :mod:`~dataplane.bff.reply.sse`: the Server-Sent Events of one job;
* :mod:`~dataplane.bff.reply.pump`: the reply pump (LISTEN on done channels, waiters, sweep);
* :mod:`~dataplane.bff.plane`: the process's queue DB, pump and verifiers;
* :mod:`~dataplane.bff.auth.urls`: the URL layout; :mod:`~dataplane.bff.openapi`: the
  OpenAPI document (its body schemas, the edge's statuses and the command beside it);
  ``static/``: the browser client and the demo page.

The BFF never imports the worker.
"""
