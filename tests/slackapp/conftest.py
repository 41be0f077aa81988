"""The Slack tests' fixtures: a loopback stand-in of Slack's Web API, and a tenant whose mailer agent posts to it."""

from collections.abc import Iterator

import pytest

from agents.definitions import DefinitionContent
from agents.models import Agent
from approvals.models import ApproverGroup
from tests.conftest import Persona
from tests.slackapp import fake_slack
from tests.slackapp.fake_slack import FakeSlack
from tests.slackapp.helpers import ADA, DEPLOY, LOOKUP, ROLLBACK, SECRET, SEND, TEAM, TOKEN, slack_app


@pytest.fixture
def slack(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeSlack]:
    fake = fake_slack.start()
    monkeypatch.setenv("SLACK_BOT_TOKEN", TOKEN)
    monkeypatch.setenv("SLACK_SIGNING_SECRET", SECRET)
    yield fake
    assert fake.server is not None
    fake.server.shutdown()
    fake.server.server_close()
    assert fake.invalid == [], "a payload slack_sdk's Block Kit models refuse"


@pytest.fixture
def mailer(slack: FakeSlack, admin: Persona) -> Agent:
    """An external agent asking to send e-mail, posted to #approvals of the tenant's Slack app; ada linked."""
    slack_app(admin, slack)
    for group in ("sre", "security", "sre-leads"):
        ApproverGroup.objects.create(tenant=admin.tenant, name=group)
    content = DefinitionContent.model_validate(
        {"name": "mailer", "runtime": "external", "tools": [SEND, DEPLOY, ROLLBACK, LOOKUP]}
    )
    agent = Agent.create(admin.tenant, content, admin.user)
    mapped = admin.api(
        "post", "/api/slack/channels", {"connection": "acme-slack", "channel": "approvals", "agent": "mailer"}
    )
    assert mapped.status_code == 201, mapped.content
    linked = admin.api("put", "/api/slack/links/ada", {"slackUserId": ADA, "slackTeamId": TEAM})
    assert linked.status_code == 200, linked.content
    return agent
