"""What the queue's notifies carry to the processes that listen.

* :mod:`.done`: the done notify, ``<job id>`` or ``<job id> <sealed note>`` with a small
  answer;
* :mod:`.progress`: a running job's progress, written to its row and notified;
* :mod:`.retries`: a failed attempt the job waits out before its next;
* :mod:`.seal`: the notes sealed with the notify secret (AES-256-GCM, bound to the job
  id and to their kind), and what opens them.

Any role that may connect may ``NOTIFY``: a note that does not open is never believed,
and the row is read instead. The channels themselves are :mod:`dataplane.queue.types`'s.
"""
