"""Request deadlines: a periodic sweep closes overdue requests `expired` and lets their runs go on
(`approvals.actions.expire_due`); beside it, the e-mail digests that are due go out (`approvals.digests`).

The sweep is one loop per serving process (started by `manage.py serve`) or the `sweep_deadlines`
command; every closing is a conditional update, so several sweepers never close a request twice (and a
digest's is too: several never send the same digest). The third loop signs each tenant's chain of receipts
(`approvals.signing`). Beside the deadline sweep, a second applies the console answers whose undo window
closed that no timer applied (their process went: `approvals.actions.held`).
"""

from approvals.actions import apply_due, escalate_due, expire_due
from approvals.digests import send_digests
from approvals.signing import sign_heads, signing_key
from console.periodic import start_periodic


def start_sweeper(every_seconds: float) -> None:
    """Run the sweeps every `every_seconds` in daemon threads of this process (once per process)."""
    start_periodic("deadlines", every_seconds, expire_due)
    start_periodic("escalations", every_seconds, escalate_due)
    start_periodic("held-answers", every_seconds, apply_due)


def start_digests(every_seconds: float) -> None:
    """Send the digests that are due every `every_seconds` in a daemon thread of this process (once per
    process)."""
    start_periodic("digests", every_seconds, send_digests)


def start_signer(every_seconds: float) -> None:
    """Sign the chain heads of receipts that moved every `every_seconds` in a daemon thread of this process
    (once per process; several signers sign a head twice at worst)."""
    signing_key()  # made now, on first run, not by the first decision
    start_periodic("receipts", every_seconds, sign_heads)
