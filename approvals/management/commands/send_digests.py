from approvals.digests import send_digests
from approvals.management.repeating import RepeatingCommand


class Command(RepeatingCommand):
    help = "Send the e-mail digests of waiting requests that are due (once, or every N seconds with --every)."

    def sweep(self) -> str:
        sent = send_digests()
        return f"sent {sent} digest(s)" if sent else ""
