from approvals.actions import apply_due, expire_due
from approvals.management.repeating import RepeatingCommand


class Command(RepeatingCommand):
    help = (
        "Close requests whose deadline passed, and apply held console answers whose undo window closed (once, or"
        " every N seconds with --every)."
    )

    def sweep(self) -> str:
        expired, applied = expire_due(), apply_due()
        done = [f"expired {len(expired)} request(s)"] if expired else []
        done += [f"applied {len(applied)} held answer(s)"] if applied else []
        return "; ".join(done)
