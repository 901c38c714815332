"""One claimed job's pipeline (:mod:`~dataplane.worker.pipeline.executor`): cache and
single flight (:mod:`~dataplane.worker.pipeline.cache`), the handler and its deadline
(:mod:`~dataplane.worker.pipeline.handler`, :mod:`~dataplane.worker.pipeline.deadlines`),
the result inline or as a blob (:mod:`~dataplane.worker.pipeline.results`), and its
observation (:mod:`~dataplane.worker.pipeline.observe`)."""
