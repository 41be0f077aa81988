"""A real console for the external agents' client and adapters: `manage.py serve` (daphne) on a free port with
its own SQLite file (a tests/processes/cluster.py installation), the admin "ada", the operator "otto" (the
service user the agents' requests come from), and each one's API token.

These tests talk to the console over HTTP only: pytest-django's test database is not the console's.
"""

import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from airlock_client import Airlock

from tests.processes.cluster import PASSWORD, Api, Cluster, manage_all, new_cluster

DEPLOY = {
    "name": "deploy",
    "description": "Deploy a service",
    "parameters": {
        "type": "object",
        "properties": {"service": {"type": "string"}, "environment": {"enum": ["staging", "production"]}},
        "required": ["service", "environment"],
        "additionalProperties": False,
    },
}
STATUS = {"name": "status", "description": "Read a service's status", "approval": "never"}

_names = itertools.count(1)


@dataclass
class Console:
    url: str
    tokens: dict[str, str]
    cluster: Cluster = field(repr=False)

    def api(self, username: str = "ada") -> Api:
        return Api(self.url, self.tokens[username])

    def client(self, username: str) -> Airlock:
        return Airlock(self.url, self.tokens[username], timeout=10, backoff=0.05)

    def external_agent(self, *tools: dict[str, Any]) -> str:
        """A new external agent declaring `tools` (deploy and status by default); its name."""
        name = f"deployer-{next(_names)}"
        definition = {"name": name, "runtime": "external", "tools": list(tools) or [DEPLOY, STATUS]}
        self.api("ada").ok("POST", "/api/agents", definition)
        return name


@pytest.fixture(scope="session")
def console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    cluster = new_cluster(Path(tmp_path_factory.mktemp("airlock-external")))
    tokens = manage_all(
        cluster.env,
        ["create_user", "otto", "--tenant", "acme", "--role", "operator", "--password", PASSWORD],
        ["create_token", "ada", "--tenant", "acme"],
        ["create_token", "otto", "--tenant", "acme"],
    )
    try:
        served = cluster.serve("daphne")
        yield Console(served.url, {"ada": tokens[1].strip(), "otto": tokens[2].strip()}, cluster)
    finally:
        cluster.stop_all()
