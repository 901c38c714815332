"""Surface Data Plane: a queue-backed request/reply service on Trio and Postgres.

A browser POSTs ``{operation, params}`` to the BFF, which enqueues a row in
``maestro_queues``; a per-surface data worker claims it, runs the operation over a
read-only client database and completes the row with a ``pg_notify``; the BFF's
reply pump streams the answer back over Server-Sent Events.
"""

__version__ = "0.1.0"
