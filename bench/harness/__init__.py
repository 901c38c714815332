"""The shared benchmark harness: a scratch Postgres and machine facts (``common``),
child processes and the one CPU meter (``procs``), a stack's start-up (``stack``),
the HTTP load clients (``client``), the demo client DB (``demo``) and the result
schema (``result``)."""
