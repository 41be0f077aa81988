"""What the process tests share: a served installation of their own (tests/processes/cluster.py)."""

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.processes.cluster import Cluster, new_cluster


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    """An installation on its own SQLite file, its processes stopped after the test (a module that needs another
    database or settings has a `cluster` of its own)."""
    cluster = new_cluster(tmp_path)
    try:
        yield cluster
    finally:
        cluster.stop_all()
