from approvals.actions import apply_due, escalate_due, expire_due
from approvals.management.repeating import RepeatingCommand


class Command(RepeatingCommand):
    help = (
        "Close requests whose deadline passed, take the escalation steps that are due, and apply held console"
        " answers whose undo window closed (once, or every N seconds with --every)."
    )

    def sweep(self) -> str:
        expired, applied, escalated = expire_due(), apply_due(), escalate_due()
        done = [f"expired {len(expired)} request(s)"] if expired else []
        done += [f"escalated {len(escalated)} request(s)"] if escalated else []
        done += [f"applied {len(applied)} held answer(s)"] if applied else []
        return "; ".join(done)
