"""Who asks: the JWT verifier (:mod:`~dataplane.bff.auth.verifier`) with its keys
(:mod:`~dataplane.bff.auth.jwks`) and the tokens it already verified
(:mod:`~dataplane.bff.auth.token_cache`); the claims it reads
(:mod:`~dataplane.bff.auth.claims`); the URL tokens of a job's routes
(:mod:`~dataplane.bff.auth.tokens`, :mod:`~dataplane.bff.auth.urls`)."""
