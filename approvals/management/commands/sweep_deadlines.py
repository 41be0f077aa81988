from approvals.actions import expire_due
from approvals.management.repeating import RepeatingCommand


class Command(RepeatingCommand):
    help = "Close requests whose deadline passed (once, or every N seconds with --every)."

    def sweep(self) -> str:
        expired = expire_due()
        return f"expired {len(expired)} request(s)" if expired else ""
