"""What operators do to the queue: the one code path the console and the CLI share.

Every action (:mod:`dataplane.operator.audit`) changes rows and records itself in
``dataplane_audit`` in one transaction: who, via what, what was asked, how many rows.
"""

from dataplane.operator.audit import ACTIONS, AuditRow, Operator, list_audit, record
from dataplane.operator.cancel import CancelOutcome, Conflict, NotFound, cancel, cancel_command

__all__ = [
    "ACTIONS",
    "AuditRow",
    "CancelOutcome",
    "Conflict",
    "NotFound",
    "Operator",
    "cancel",
    "cancel_command",
    "list_audit",
    "record",
]
