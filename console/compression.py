"""Pages and API answers gzipped on the wire (static files come precompressed from whitenoise).

A full inbox page is ~130 KB of HTML (25 cards, each with its answer, claim and cancel forms) and ~9 KB
gzipped. Streaming responses (the SSE event streams, the audit export) are left as they are: an event must
reach the reader when it is written, not when a compressor's buffer fills. Django's GZipMiddleware pads each
compressed body with random bytes (BREACH mitigation, since 4.2); the CSRF token is masked per response too.
"""

from django.http import HttpRequest, HttpResponseBase
from django.middleware.gzip import GZipMiddleware


class PageGZipMiddleware(GZipMiddleware):
    def process_response(self, request: HttpRequest, response: HttpResponseBase) -> HttpResponseBase:
        if response.streaming:
            return response
        return super().process_response(request, response)
