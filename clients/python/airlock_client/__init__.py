"""Airlock's Python client and its adapters (docs/external-agents.md)."""
