"""A worker's claims: waking on call (:mod:`~dataplane.worker.claims.oncall`), claiming
as many as there are free slots (:mod:`~dataplane.worker.claims.claimer`), holding them
(:mod:`~dataplane.worker.claims.held`), renewing their leases
(:mod:`~dataplane.worker.claims.leases`), completing them in batches
(:mod:`~dataplane.worker.claims.completer`), and the worker's liveness, whose beat
rescues the claims of a worker that died (:mod:`~dataplane.worker.claims.liveness`)."""
