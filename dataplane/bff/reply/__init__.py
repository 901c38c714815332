"""The reply path: the pump that hears done notifies (:mod:`~dataplane.bff.reply.pump`),
its memory of recent answers (:mod:`~dataplane.bff.reply.answers`), and the two ways an
answer reaches a browser: a stream (:mod:`~dataplane.bff.reply.sse`) and
``Prefer: wait`` (:mod:`~dataplane.bff.reply.prefer`)."""
