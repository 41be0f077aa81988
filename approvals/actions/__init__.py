"""The changes made to requests and rules, one callable each, used alike by the pages, the API, the
commands and the deadline sweep: each checks the member's right, writes, and announces the change to the
open consoles once it is committed."""

from approvals.actions.answers import Answered, answer_many, answer_request
from approvals.actions.claims import ClaimRefused, claim, release
from approvals.actions.expiry import expire_due
from approvals.actions.rules import remember_rule, revoke_rule

__all__ = [
    "Answered",
    "ClaimRefused",
    "answer_many",
    "answer_request",
    "claim",
    "expire_due",
    "release",
    "remember_rule",
    "revoke_rule",
]
