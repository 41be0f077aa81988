"""What the examples share: the console's address and token from the environment, and the example agent's
definition, created when the console does not have it yet."""

import os
import sys
from pathlib import Path
from typing import Any

import httpx

# Run from a checkout without installing the client: its folder is clients/python.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

URL = os.environ.get("AIRLOCK_URL", "http://127.0.0.1:8000")
TOKEN = os.environ.get("AIRLOCK_TOKEN", "")
AGENT = os.environ.get("AIRLOCK_AGENT", "example-deployer")

DEFINITION: dict[str, Any] = {
    "name": AGENT,
    "runtime": "external",
    "description": "An agent of clients/python/examples: it deploys services, with approval.",
    "tools": [
        {
            "name": "deploy",
            "description": "Deploy a service",
            "parameters": {
                "type": "object",
                "properties": {"service": {"type": "string"}, "environment": {"enum": ["staging", "production"]}},
                "required": ["service", "environment"],
                "additionalProperties": False,
            },
        }
    ],
}


def ensure_agent() -> None:
    """Create the example's external agent (an admin's token), unless it exists."""
    if not TOKEN:
        sys.exit("Set AIRLOCK_TOKEN (manage.py create_token USER --tenant SLUG) and AIRLOCK_URL.")
    headers = {"Authorization": f"Bearer {TOKEN}"}
    found = httpx.get(f"{URL}/api/agents/{AGENT}", headers=headers, timeout=10)
    if found.status_code == 404:
        created = httpx.post(f"{URL}/api/agents", json=DEFINITION, headers=headers, timeout=10)
        created.raise_for_status()
        print(f"created the external agent {AGENT}")
    else:
        found.raise_for_status()


def inbox_hint(request_id: str) -> None:
    print(f"waiting for an answer: {URL}/inbox/ (request {request_id})", flush=True)
