"""The bottom floor: the plane's exceptions (:mod:`~dataplane.core.errors`), reading
settings from the environment (:mod:`~dataplane.core.settings`) and the process's heap
(:mod:`~dataplane.core.runtime`). It imports nothing of the plane above it."""
