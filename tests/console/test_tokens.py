"""The console's token page: a new token is shown once, and can be revoked."""

import re

from django.test import Client

from console.models import ApiToken

RAW_TOKEN = re.compile(r"al_[0-9a-f]{8}_[A-Za-z0-9_-]{43}")


def form_key(persona) -> str:
    """The one-time key of the token form the page shows."""
    return re.search(r'name="once" value="([0-9a-f]+)"', persona.client.get("/tokens/").content.decode()).group(1)


def create_token(persona, name: str = "CI pipeline") -> str:
    response = persona.client.post("/tokens/", {"name": name, "once": form_key(persona)})
    assert response.status_code == 200
    shown = RAW_TOKEN.findall(response.content.decode())
    assert len(shown) == 1, "the new token is shown exactly once"
    return shown[0]


def test_it_shows_a_new_token_once(reader):
    raw = create_token(reader)
    assert ApiToken.objects.filter(membership=reader.membership, name="CI pipeline").exists()
    reloaded = reader.client.get("/tokens/").content.decode()
    assert "CI pipeline" in reloaded
    assert raw not in reloaded
    assert RAW_TOKEN.search(reloaded) is None


def test_the_page_showing_a_new_token_is_never_kept_by_the_browser(reader):
    """Else Back, after leaving the page, showed the secret again from the browser's cache."""
    shown = reader.client.post("/tokens/", {"name": "CI", "once": form_key(reader)})

    assert RAW_TOKEN.search(shown.content.decode())
    assert "no-store" in shown["Cache-Control"]


def test_it_creates_a_token_that_works_on_the_api(reader, agent):
    raw = create_token(reader)
    response = Client().get("/api/agents", HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert response.status_code == 200
    assert [a["name"] for a in response.json()] == ["helper"]


def test_a_form_sent_twice_makes_one_token(reader):
    # The browser's "send the form again" on a reload of the page that showed the new token.
    form = {"name": "deploy", "once": form_key(reader)}
    first = reader.client.post("/tokens/", form)
    again = reader.client.post("/tokens/", form)

    assert len(RAW_TOKEN.findall(first.content.decode())) == 1
    assert RAW_TOKEN.search(again.content.decode()) is None
    assert "This form was sent before" in again.content.decode()
    assert ApiToken.objects.filter(membership=reader.membership, name="deploy").count() == 1
    # The page it answered with has a new form, which makes a token.
    fresh = re.search(r'name="once" value="([0-9a-f]+)"', again.content.decode()).group(1)
    assert RAW_TOKEN.search(reader.client.post("/tokens/", {**form, "once": fresh}).content.decode())


def test_it_asks_again_for_a_token_without_a_name(reader):
    response = reader.client.post("/tokens/", {"name": "", "once": form_key(reader)})
    assert response.status_code == 200
    assert b"This field is required." in response.content
    assert RAW_TOKEN.search(response.content.decode()) is None
    assert not ApiToken.objects.filter(membership=reader.membership).exclude(name="tests").exists()


def test_it_revokes_a_token(reader):
    raw = create_token(reader)
    token = ApiToken.objects.get(membership=reader.membership, name="CI pipeline")
    response = reader.client.post(f"/tokens/{token.pk}/revoke/", follow=True)
    assert response.status_code == 200
    assert "Token “CI pipeline” revoked." in response.content.decode()
    assert b"revoked" in response.content
    assert Client().get("/api/agents", HTTP_AUTHORIZATION=f"Bearer {raw}").status_code == 401


def test_it_lists_only_the_tokens_of_the_current_membership(reader, outsider):
    create_token(outsider, "globex secret pipeline")
    assert b"globex secret pipeline" not in reader.client.get("/tokens/").content


def test_it_does_not_let_an_outsider_revoke_a_token(reader, outsider):
    token = ApiToken.objects.get(membership=reader.membership)
    assert outsider.client.post(f"/tokens/{token.pk}/revoke/").status_code == 404
    token.refresh_from_db()
    assert token.revoked_at is None
    assert reader.api("GET", "/api/agents").status_code == 200


def test_it_revokes_only_by_post(reader):
    token = ApiToken.objects.get(membership=reader.membership)
    assert reader.client.get(f"/tokens/{token.pk}/revoke/").status_code == 405
    token.refresh_from_db()
    assert token.revoked_at is None
