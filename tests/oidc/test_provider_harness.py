"""The OpenID provider harness (tests/oidc/provider.py) is a real provider: discovery, an RS256 JWKS, the
Authorization Code flow with PKCE through its own login form, `groups` in the ID token and at userinfo, RP-initiated
logout through its confirmation page, and each test mode making the ID token bad in exactly its one way. Driven
over HTTP from Python (no browser), as a relying party would."""

import base64
import hashlib
import html
import json
import re
import secrets
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from http.cookiejar import CookieJar
from typing import Any

import jwt
import pytest

from tests.oidc.provider import Provider, start_provider

pytestmark = [pytest.mark.processes]

REDIRECT_URI = "http://127.0.0.1:9/oidc/callback/"
LOGGED_OUT_URI = "http://127.0.0.1:9/logged-out/"
ADA = {
    "sub": "sub-ada",
    "email": "ada@example.com",
    "email_verified": True,
    "preferred_username": "ada",
    "name": "Ada Lovelace",
    "groups": ["ops", "finance"],
}


@pytest.fixture(scope="module")
def provider(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Provider]:
    with start_provider(
        tmp_path_factory.mktemp("oidc"),
        redirect_uris=[REDIRECT_URI],
        post_logout_redirect_uris=[LOGGED_OUT_URI],
        accounts={"ada": ADA},
    ) as started:
        yield started


@pytest.fixture(autouse=True)
def normal_mode(provider: Provider) -> Iterator[None]:
    yield
    provider.set_mode("normal")


class NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


class Browser:
    """Cookies kept, redirects not followed: each step's status, Location and body."""

    def __init__(self) -> None:
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(CookieJar()), NoRedirects)

    def go(self, url: str, form: dict[str, str] | None = None) -> tuple[int, str, str]:
        data = urllib.parse.urlencode(form).encode() if form is not None else None
        try:
            with self.opener.open(url, data, timeout=10) as response:
                return response.status, response.headers.get("Location", ""), response.read().decode()
        except urllib.error.HTTPError as answer:
            with answer:
                return answer.code, answer.headers.get("Location", ""), answer.read().decode()


def discovery(provider: Provider) -> dict[str, Any]:
    with urllib.request.urlopen(f"{provider.issuer}/.well-known/openid-configuration", timeout=10) as response:
        return json.loads(response.read())


def form_action(page: str, selector_name: str) -> str:
    """The action of the page's form that holds an element named `selector_name` (the selectors a browser test uses)."""
    assert f'name="{selector_name}"' in page, page
    return html.unescape(re.search(r'<form[^>]* action="([^"]+)"', page)[1])


def sign_in(
    provider: Provider, browser: Browser, *, login: str = "ada", nonce: str = "", verifier: str = ""
) -> tuple[str, str]:
    """Walk the authorization request through the provider's login form to the redirect URI; the code and the
    PKCE verifier to redeem it with."""
    config = discovery(provider)
    verifier = verifier or secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    state = secrets.token_urlsafe(12)
    query = urllib.parse.urlencode(
        {
            "client_id": provider.client_id,
            "redirect_uri": REDIRECT_URI,
            "response_type": "code",
            "scope": "openid email profile",
            "state": state,
            "nonce": nonce or secrets.token_urlsafe(12),
            "code_challenge": challenge,
            "code_challenge_method": "S256",
        }
    )
    status, location, _ = browser.go(f"{config['authorization_endpoint']}?{query}")
    if location.startswith("/interaction/"):  # no provider session yet: its login form
        status, _, page = browser.go(provider.issuer + location)
        assert status == 200
        assert 'name="password"' in page and '<button type="submit"' in page
        status, location, _ = browser.go(
            urllib.parse.urljoin(provider.issuer, form_action(page, "login")), {"login": login, "password": "any"}
        )
        assert status == 303, status
        status, location, _ = browser.go(urllib.parse.urljoin(provider.issuer, location))
    assert status in (302, 303) and location.startswith(REDIRECT_URI), (status, location)
    answer = urllib.parse.parse_qs(urllib.parse.urlsplit(location).query)
    assert answer["state"] == [state] and answer["iss"] == [provider.issuer], answer
    return answer["code"][0], verifier


def redeem(provider: Provider, code: str, verifier: str) -> tuple[int, dict[str, Any]]:
    """The token endpoint's answer to the code, the client authenticating with client_secret_post."""
    form = {
        "grant_type": "authorization_code",
        "code": code,
        "redirect_uri": REDIRECT_URI,
        "code_verifier": verifier,
        "client_id": provider.client_id,
        "client_secret": provider.client_secret,
    }
    status, _, body = Browser().go(discovery(provider)["token_endpoint"], form)
    return status, json.loads(body)


def id_token_claims(provider: Provider, id_token: str, **options: Any) -> dict[str, Any]:
    """The ID token verified as a relying party must: signature by the JWKS, issuer, audience, expiry."""
    key = jwt.PyJWKClient(discovery(provider)["jwks_uri"]).get_signing_key_from_jwt(id_token)
    return jwt.decode(
        id_token, key, algorithms=["RS256"], audience=provider.client_id, issuer=provider.issuer, **options
    )


def test_discovery_names_every_endpoint_and_the_jwks_an_rs256_key(provider: Provider):
    config = discovery(provider)
    assert config["issuer"] == provider.issuer
    for endpoint in ("authorization", "token", "userinfo", "end_session"):
        assert config[f"{endpoint}_endpoint"].startswith(provider.issuer + "/"), endpoint
    assert "S256" in config["code_challenge_methods_supported"]
    assert "client_secret_post" in config["token_endpoint_auth_methods_supported"]
    with urllib.request.urlopen(config["jwks_uri"], timeout=10) as response:
        (key,) = json.loads(response.read())["keys"]
    assert (key["kty"], key["alg"], key["use"]) == ("RSA", "RS256", "sig") and key["kid"]
    assert "d" not in key  # the public half only


def test_set_mode_changes_only_the_mode(provider: Provider):
    before, logouts = discovery(provider), provider.logouts()
    provider.set_mode("wrong-issuer")
    assert (discovery(provider), provider.logouts()) == (before, logouts)
    with pytest.raises(urllib.error.HTTPError):
        provider.set_mode("no-such-mode")


def test_a_code_flow_with_pkce_gives_groups_in_the_id_token_and_at_userinfo(provider: Provider):
    browser = Browser()
    code, verifier = sign_in(provider, browser, nonce="nonce-1")
    status, tokens = redeem(provider, code, verifier)
    assert status == 200, tokens
    claims = id_token_claims(provider, tokens["id_token"])
    assert claims["nonce"] == "nonce-1" and claims["sub"] == ADA["sub"]
    assert claims["groups"] == ADA["groups"] and claims["email"] == ADA["email"]
    request = urllib.request.Request(
        discovery(provider)["userinfo_endpoint"], headers={"Authorization": f"Bearer {tokens['access_token']}"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        userinfo = json.loads(response.read())
    assert userinfo == {**ADA}

    # The code cannot be redeemed again, nor a fresh one without its own verifier (PKCE is verified).
    assert redeem(provider, code, verifier)[1]["error"] == "invalid_grant"
    code, _ = sign_in(provider, browser)  # the provider session signs in without the form
    assert redeem(provider, code, secrets.token_urlsafe(48))[1]["error"] == "invalid_grant"


def test_claims_follow_the_accounts_file_between_two_sign_ins(provider: Provider):
    provider.set_accounts({"ada": {**ADA, "groups": ["auditors"]}})
    try:
        _, tokens = redeem(provider, *sign_in(provider, Browser()))
        assert id_token_claims(provider, tokens["id_token"])["groups"] == ["auditors"]
    finally:
        provider.set_accounts({"ada": ADA})


def test_an_unknown_login_stays_on_the_form(provider: Provider):
    browser = Browser()
    _, location, _ = browser.go(
        discovery(provider)["authorization_endpoint"]
        + "?"
        + urllib.parse.urlencode(
            {"client_id": provider.client_id, "redirect_uri": REDIRECT_URI, "response_type": "code", "scope": "openid"}
        )
    )
    _, _, page = browser.go(provider.issuer + location)
    status, _, page = browser.go(urllib.parse.urljoin(provider.issuer, form_action(page, "login")), {"login": "eve"})
    assert status == 401 and 'No account "eve"' in html.unescape(page) and 'name="login"' in page


def test_each_mode_spoils_the_id_token_in_its_one_way(provider: Provider):
    browser = Browser()
    provider.set_mode("wrong-nonce")
    _, tokens = redeem(provider, *sign_in(provider, browser, nonce="nonce-2"))
    claims = id_token_claims(provider, tokens["id_token"])  # signature, issuer, audience and expiry still good
    assert claims["nonce"] != "nonce-2" and claims["groups"] == ADA["groups"]

    for mode, error in [
        ("expired", jwt.ExpiredSignatureError),
        ("wrong-key", jwt.InvalidSignatureError),
        ("wrong-audience", jwt.InvalidAudienceError),
        ("wrong-issuer", jwt.InvalidIssuerError),
    ]:
        provider.set_mode(mode)
        _, tokens = redeem(provider, *sign_in(provider, browser, nonce="nonce-3"))
        with pytest.raises(error):
            id_token_claims(provider, tokens["id_token"])
        header = jwt.get_unverified_header(tokens["id_token"])
        assert header["alg"] == "RS256" and header["kid"] == discovery_kid(provider), mode

    provider.set_mode("garbled")
    _, tokens = redeem(provider, *sign_in(provider, browser, nonce="nonce-3"))
    assert tokens["id_token"] == "not-a-jwt"

    provider.set_mode("normal")
    _, tokens = redeem(provider, *sign_in(provider, browser, nonce="nonce-4"))
    assert id_token_claims(provider, tokens["id_token"])["nonce"] == "nonce-4"


def discovery_kid(provider: Provider) -> str:
    with urllib.request.urlopen(discovery(provider)["jwks_uri"], timeout=10) as response:
        return json.loads(response.read())["keys"][0]["kid"]


def test_rp_initiated_logout_confirms_then_returns_to_the_registered_uri(provider: Provider):
    browser = Browser()
    _, tokens = redeem(provider, *sign_in(provider, browser))
    before = provider.logouts()
    query = urllib.parse.urlencode(
        {"id_token_hint": tokens["id_token"], "post_logout_redirect_uri": LOGGED_OUT_URI, "state": "bye"}
    )
    status, _, page = browser.go(f"{discovery(provider)['end_session_endpoint']}?{query}")
    assert status == 200 and 'name="logout"' in page  # its confirmation page
    xsrf = re.search(r'name="xsrf" value="([^"]+)"', page)[1]
    status, location, _ = browser.go(form_action(page, "xsrf"), {"xsrf": xsrf, "logout": "yes"})
    assert status == 303 and location == f"{LOGGED_OUT_URI}?state=bye", (status, location)
    assert provider.logouts() == before + 1
    # The provider session ended: the next authorization asks for the login form again.
    _, location, _ = browser.go(
        discovery(provider)["authorization_endpoint"]
        + "?"
        + urllib.parse.urlencode(
            {"client_id": provider.client_id, "redirect_uri": REDIRECT_URI, "response_type": "code", "scope": "openid"}
        )
    )
    assert location.startswith("/interaction/")
