"""The approvals pages, one module per page: the inbox (`inbox`: the list, its filters and pages, a run's batch
answer), what its cards post (`answers`: answer, selection, claim, cancel), the rules page (`rules`) and the
audit page (`audit`, over the entries of approvals/audit.py). approvals/urls.py names each view."""
