"""Fixtures of the agents tests: the `assistant` agent, a temporary media folder."""

import pytest

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
