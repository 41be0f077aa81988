"""Fixtures of the agents tests: the `assistant` agent, a temporary media folder."""

import pytest

from agents import seats, workers
from agents.models import Agent
from tests.helpers import make_agent


@pytest.fixture
def assistant(admin) -> Agent:
    """The agent of SPEC section 3: send_email (approval), get_time, get_user_location, parameters, cultures."""
    return make_agent(admin)


@pytest.fixture
def media(settings, tmp_path):
    """Uploaded attachments go to a temporary folder, not the data folder."""
    settings.MEDIA_ROOT = tmp_path / "media"
    return settings.MEDIA_ROOT


@pytest.fixture
def seat(monkeypatch) -> workers.WorkerPool:
    """A pool of this process with one idle thread, for a run to be handed to (its thread is this test's: the task
    the hand-over gives it is run here, or nowhere)."""
    pool = workers.WorkerPool(1, poll=30)
    pool.idle(0)
    monkeypatch.setattr(seats, "POOLS", [pool])
    return pool
