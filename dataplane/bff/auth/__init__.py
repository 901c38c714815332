"""The BFF's own side of who asks: the URL tokens of a job's routes
(:mod:`~dataplane.bff.auth.tokens`, :mod:`~dataplane.bff.auth.urls`). The JWT verifier
itself is shared with the console: :mod:`dataplane.auth`."""
