"""A console page's static files come under hashed names with a far-future cache, so the next page loads none
of them again. (That every page loads under 150 KB cold is checked by the walks of tests/browser/test_pages.py.)"""

from collections.abc import Callable

import pytest
from playwright.sync_api import Page

from tests.browser.conftest import load

pytestmark = pytest.mark.browser

FAR_FUTURE = 365 * 24 * 3600


def test_it_serves_static_files_under_hashed_names_for_a_year(sign_in: Callable[[str], Page]) -> None:
    page = sign_in("ada")
    static = [request for request, _ in load(page, "/inbox/")[1] if "/static/" in request.url]
    assert len(static) >= 3
    for request in static:
        response = request.response()
        assert response is not None and response.status == 200, request.url
        # console.css -> console.<12 hex digits>.css
        name = request.url.rsplit("/", 1)[1]
        assert len(name.split(".")) >= 3 and len(name.split(".")[-2]) == 12, request.url
        cache = response.headers["cache-control"]
        max_age = int(cache.split("max-age=")[1].split(",")[0])
        assert max_age >= FAR_FUTURE and "immutable" in cache, (request.url, cache)

    # The next page takes them from the browser's cache: only its HTML comes over the network.
    again = load(page, "/rules/")[1]
    seen = {request.url for request in static}
    fetched = [request.url for request, size in again if request.url in seen and size > 0]
    assert fetched == []
    assert any(request.resource_type == "document" and size > 0 for request, size in again)
