"""The inbox's tool filter offers the tool names of the tenant's open requests, each once, in order (read by
a skip scan over the open-request index: approvals.views.inbox_pages._open_tools)."""

import re

import pytest

from approvals.models import PendingRequest, RequestStatus
from tests.approvals.test_inbox_pages import ask, mailer, make_agent  # noqa: F401

pytestmark = pytest.mark.django_db


def offered(persona) -> list[str]:
    html = persona.client.get("/inbox/").content.decode()
    datalist = re.search(r'<datalist id="inbox-tools">(.*?)</datalist>', html, re.S)
    assert datalist is not None
    return re.findall(r'<option value="([^"]*)">', datalist.group(1))


def test_it_offers_each_open_requests_tool_once_in_order(operator, admin, outsider, mailer):  # noqa: F811
    assert offered(operator) == []
    make_agent(admin, "clock", tools=[{"name": "get_time", "approval": "always"}])
    ask(operator, session="s1")
    ask(operator, session="s2")
    ask(operator, message="call get_time", session="t1", agent="clock")
    make_agent(outsider, "theirs", tools=[{"name": "get_time", "approval": "always"}])
    theirs = ask(outsider, message="call get_time", session="o1", agent="theirs")

    assert offered(operator) == ["get_time", "send_email"]

    # A request answered (or closed) is no longer open: its tool goes when no open request has it.
    # Another tenant's open get_time request is not offered.
    PendingRequest.objects.filter(tenant=operator.tenant, tool_name="get_time").update(status=RequestStatus.CANCELLED)
    assert offered(operator) == ["send_email"]
    assert offered(outsider) == ["get_time"], theirs
