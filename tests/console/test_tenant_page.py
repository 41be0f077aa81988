"""The Tenant page (admins): the request events webhook, chosen among the webhook connections granted to the
tenant, and the approver groups (create, add and remove members of the tenant, delete one nothing routes to);
the Notifications page, where each member opts in to e-mail digests."""

import pytest

from approvals.models import ApproverGroup, Digest
from console.models import Tenant
from tests.conftest import grant, make_persona
from tests.helpers import make_agent


@pytest.fixture
def finance(acme, operator) -> ApproverGroup:
    group = ApproverGroup.objects.create(tenant=acme, name="finance")
    group.members.add(operator.user)
    return group


def test_it_shows_the_page_to_admins_only_with_the_styled_error_page(admin, operator, reader):
    page = admin.client.get("/tenant/")
    assert page.status_code == 200
    assert b"Request events" in page.content and b"Approver groups" in page.content
    assert b'href="/tenant/"' in page.content  # in the top menu

    for persona in (operator, reader):
        refused = persona.client.get("/tenant/")
        assert refused.status_code == 403
        assert b"This needs the admin role in the current tenant." in refused.content
        assert b'class="topbar"' in refused.content  # the console's own page (base.html), not Django's bare one
        assert b'href="/tenant/"' not in persona.client.get("/").content
        assert persona.client.post("/tenant/groups/", {"name": "ops"}).status_code == 403
    assert not ApproverGroup.objects.exists()


def test_it_offers_and_saves_only_webhooks_granted_to_the_tenant(admin, acme, globex):
    mine = grant("events", "webhook", acme, url="http://127.0.0.1:9/events", secret_env="EVENTS_SECRET")
    everyones = grant("shared-hook", "webhook", url="http://127.0.0.1:9/shared")
    theirs = grant("globex-hook", "webhook", globex, url="http://127.0.0.1:9/globex")
    grant("meetings-http", "mcp", acme, url="http://127.0.0.1:9/mcp")

    page = admin.client.get("/tenant/").content.decode()
    assert "events" in page and "shared-hook" in page
    assert "globex-hook" not in page and "meetings-http" not in page

    for refused in (theirs.pk, 10**9, "x"):
        response = admin.client.post("/tenant/webhook/", {"connection": refused})
        assert response.status_code == 400
        assert "Select a valid choice" in response.content.decode()
    mcp = admin.client.post(
        "/tenant/webhook/", {"connection": grant("mcp-2", "mcp", acme, url="http://127.0.0.1:9/mcp").pk}
    )
    assert mcp.status_code == 400
    acme.refresh_from_db()
    assert acme.request_webhook is None

    assert admin.client.post("/tenant/webhook/", {"connection": mine.pk}).status_code == 302
    acme.refresh_from_db()
    assert acme.request_webhook == mine
    assert "Request events go to events." in admin.client.get("/tenant/").content.decode()
    mine.tenants.set([])  # the installation took the grant back
    page = admin.client.get("/tenant/").content.decode()
    assert "events</strong>, no longer granted to Acme: nothing is sent" in page
    assert admin.client.post("/tenant/webhook/", {"connection": everyones.pk}).status_code == 302
    acme.refresh_from_db()
    assert acme.request_webhook == everyones
    admin.client.post("/tenant/webhook/", {"connection": ""})
    acme.refresh_from_db()
    assert acme.request_webhook is None


def test_it_creates_a_group_and_refuses_a_bad_or_taken_name(admin, acme, finance):
    assert admin.client.post("/tenant/groups/", {"name": "legal"}).status_code == 302
    assert ApproverGroup.objects.filter(tenant=acme, name="legal").exists()

    taken = admin.client.post("/tenant/groups/", {"name": "finance"})
    bad = admin.client.post("/tenant/groups/", {"name": "Legal Team"})
    assert (taken.status_code, bad.status_code) == (400, 400)
    assert "There is a group named finance already." in taken.content.decode()
    assert "Use lowercase letters, digits, - and _ only." in bad.content.decode()
    assert ApproverGroup.objects.filter(tenant=acme).count() == 2


def test_it_adds_and_removes_members_of_the_tenant_only(admin, reader, outsider, finance):
    page = admin.client.get("/tenant/").content.decode()
    assert "rita" in page and "oscar" not in page  # offered: the tenant's members not in the group

    assert admin.client.post(f"/tenant/groups/{finance.pk}/members/", {f"group-{finance.pk}-user": reader.user.pk})
    assert set(finance.members.values_list("username", flat=True)) == {"otto", "rita"}

    stranger = admin.client.post(
        f"/tenant/groups/{finance.pk}/members/", {f"group-{finance.pk}-user": outsider.user.pk}
    )
    assert stranger.status_code == 400
    assert "Select a valid choice" in stranger.content.decode()

    remove = f"/tenant/groups/{finance.pk}/members/{reader.user.pk}/remove/"
    assert admin.client.post(remove).status_code == 302
    assert list(finance.members.values_list("username", flat=True)) == ["otto"]
    assert admin.client.post(remove).status_code == 404  # no longer a member


def test_it_deletes_a_group_only_when_nothing_routes_to_it(admin, acme, finance):
    make_agent(admin, tools=[{"name": "send_email", "approval": "always", "approvers": "finance"}])

    page = admin.client.get("/tenant/").content.decode()
    assert "Routed to by assistant." in page
    refused = admin.client.post(f"/tenant/groups/{finance.pk}/delete/", follow=True)
    assert (
        "Group finance is not deleted: the definitions of assistant route requests to it." in refused.content.decode()
    )
    assert ApproverGroup.objects.filter(pk=finance.pk).exists()

    admin.api(
        "PUT", "/api/agents/assistant", {"name": "assistant", "instructions": "Hi.", "tools": [{"name": "get_time"}]}
    )
    deleted = admin.client.post(f"/tenant/groups/{finance.pk}/delete/", follow=True)
    assert "Group finance deleted." in deleted.content.decode()
    assert not ApproverGroup.objects.filter(pk=finance.pk).exists()


def test_an_outsider_reaches_no_group_of_another_tenant(outsider, finance, operator):
    for path in (
        f"/tenant/groups/{finance.pk}/members/",
        f"/tenant/groups/{finance.pk}/members/{operator.user.pk}/remove/",
        f"/tenant/groups/{finance.pk}/delete/",
    ):
        assert outsider.client.post(path, {f"group-{finance.pk}-user": operator.user.pk}).status_code == 404, path
    assert list(finance.members.all()) == [operator.user]


def test_every_member_opts_in_and_out_of_digests_for_themselves(reader, operator):
    page = reader.client.get("/notifications/")
    assert page.status_code == 200
    assert "you answer none, so your digests stay empty" in page.content.decode()

    no_address = operator.client.post("/notifications/", {"enabled": "on", "after_minutes": "15", "email": ""})
    assert no_address.status_code == 400
    assert "An address is needed" in no_address.content.decode()
    too_long = operator.client.post("/notifications/", {"enabled": "on", "after_minutes": "99999", "email": "o@x.io"})
    assert too_long.status_code == 400
    assert not Digest.objects.exists()

    saved = operator.client.post("/notifications/", {"enabled": "on", "after_minutes": "15", "email": "otto@x.io"})
    assert saved.status_code == 302
    digest = Digest.objects.get()
    assert (digest.membership, digest.after_minutes) == (operator.membership, 15)
    operator.user.refresh_from_db()
    assert operator.user.email == "otto@x.io"
    assert "On: after 15 minutes" in operator.client.get("/notifications/").content.decode()

    operator.client.post("/notifications/", {"after_minutes": "15", "email": "otto@x.io"})
    assert not Digest.objects.exists()


def test_a_digest_belongs_to_the_membership_of_the_current_tenant(operator, globex):
    make_persona("other", globex, "admin")
    Tenant.objects.get(slug="globex").memberships.create(user=operator.user, role="reader")
    operator.client.post("/tenant/switch/", {"tenant": globex.pk})
    operator.client.post("/notifications/", {"enabled": "on", "after_minutes": "5", "email": "otto@x.io"})
    assert Digest.objects.get().membership.tenant == globex


def test_it_warns_when_a_reader_joins_a_group_and_marks_them_in_it(admin, reader, finance):
    page = admin.client.get("/tenant/").content.decode()
    assert "Route requests to it in an agent&#x27;s form" in page and '"approvers": "name"' not in page
    assert "cannot answer" not in page  # otto is an operator

    added = admin.client.post(
        f"/tenant/groups/{finance.pk}/members/", {f"group-{finance.pk}-user": reader.user.pk}, follow=True
    )

    html = added.content.decode()
    assert (
        '<li class="warning">rita added to finance. As a reader they cannot answer its requests: make them an operator'
        in html
    )
    assert "rita <span" in html and "viewer: cannot answer" in html
    assert "otto\n" in html and html.count("viewer: cannot answer") == 1
    assert set(finance.members.values_list("username", flat=True)) == {"otto", "rita"}
