"""What the run lifecycle tells the apps above it, which it does not import (docs/architecture.md, "Layers").

`requests_opened(requests=[...])`: requests a turn or a fork just opened, sent once they are committed; approvals
announces them (every open inbox, the request events webhook)."""

from django.dispatch import Signal

requests_opened = Signal()
