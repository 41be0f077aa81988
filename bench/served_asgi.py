"""The console's ASGI application as `manage.py serve` runs it, collector tuning included, for the benches
that start daphne themselves."""

from console.asgi import application
from console.management.commands.serve import tune_collector

tune_collector()

__all__ = ["application"]
