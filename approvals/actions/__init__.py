"""The changes made to requests and rules, one callable each, used alike by the pages, the API, the
commands and the deadline sweep: each checks the member's right, writes, and announces the change to the
open consoles once it is committed."""

from approvals.actions.answers import Answered, answer_request
from approvals.actions.claims import ClaimRefused, claim, release
from approvals.actions.escalation import escalate_due
from approvals.actions.expiry import expire_due
from approvals.actions.external import Opened, RequestRefused, open_request
from approvals.actions.held import HELD_UNTIL, Held, UndoRefused, apply_due, hold_answers, notice_rows, notices, undo
from approvals.actions.interceptions import PoliciesUnavailable, verdict_for
from approvals.actions.rules import do_edit_rule, do_revoke_rule, remember_rule
from approvals.actions.settling import cancel_request, report_outcome

__all__ = [
    "HELD_UNTIL",
    "Answered",
    "ClaimRefused",
    "Held",
    "Opened",
    "PoliciesUnavailable",
    "RequestRefused",
    "UndoRefused",
    "answer_request",
    "apply_due",
    "cancel_request",
    "claim",
    "do_edit_rule",
    "do_revoke_rule",
    "escalate_due",
    "expire_due",
    "hold_answers",
    "notice_rows",
    "notices",
    "open_request",
    "release",
    "remember_rule",
    "report_outcome",
    "undo",
    "verdict_for",
]
