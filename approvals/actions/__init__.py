"""The changes made to requests and rules, one callable each, used alike by the pages, the API, the
commands and the deadline sweep: each checks the member's right, writes, and announces the change to the
open consoles once it is committed."""

from approvals.actions.answers import Answered, answer_many, answer_request, decide
from approvals.actions.claims import ClaimRefused, claim, release
from approvals.actions.expiry import expire_due
from approvals.actions.external import Opened, RequestRefused, cancel_request, open_request, report_outcome
from approvals.actions.interceptions import PoliciesUnavailable, verdict_for
from approvals.actions.rules import edit_rule, remember_rule, revoke_rule

__all__ = [
    "Answered",
    "ClaimRefused",
    "Opened",
    "PoliciesUnavailable",
    "RequestRefused",
    "answer_many",
    "answer_request",
    "cancel_request",
    "claim",
    "decide",
    "edit_rule",
    "expire_due",
    "open_request",
    "release",
    "remember_rule",
    "report_outcome",
    "revoke_rule",
    "verdict_for",
]
