"""Maintenance: every periodic service the fleet runs for the queue, one per module.

* :mod:`~dataplane.maintenance.elections`: elections held in a row only the plane's
  roles may write (``dataplane_elections``);
* :mod:`~dataplane.maintenance.leader`: :class:`Leader`, the one elected process of the
  fleet that runs the services below (each worker contends);
* :mod:`~dataplane.maintenance.retention`: one pass over the queue DB (lapsed last
  claims to poison, retention of finished rows, blob expiry), under the election;
* :mod:`~dataplane.maintenance.schedule`: :class:`Maintenance`, the pass on its own
  cadence, busy or not;
* :mod:`~dataplane.maintenance.poison`: how a row parked as poison is traced, counted
  and logged (by a pass, or by a claimer that finds one);
* :mod:`~dataplane.maintenance.sampler`: the queue's shape as gauges;
* :mod:`~dataplane.maintenance.growth`: a table that outgrew its statistics is analyzed,
  so plans made on a small queue are made again.

It builds on :mod:`dataplane.queue`, :mod:`dataplane.db` and :mod:`telemetry`; the
processes that run it (the worker, ``dataplane maintenance``) build on it.
"""
