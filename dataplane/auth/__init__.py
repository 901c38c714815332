"""Who asks, for every process that verifies callers (the BFF, the console): the JWT
verifier (:mod:`~dataplane.auth.verifier`) with its keys (:mod:`~dataplane.auth.jwks`)
and the tokens it already verified (:mod:`~dataplane.auth.token_cache`); the claims it
reads (:mod:`~dataplane.auth.claims`); its configuration (:mod:`~dataplane.auth.config`).
"""
