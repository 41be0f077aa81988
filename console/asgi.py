import gc
import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
# Django must be set up before anything imports models (the routing does).
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402

from approvals.routing import websocket_urlpatterns  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": django_asgi_app,
        "websocket": AllowedHostsOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
    }
)

# A server's collector: everything loaded so far lives as long as the process, so full collections skip it
# (gc.freeze), and young collections run every 10,000 allocations rather than 700. With the default
# thresholds a console with a few hundred open sockets ran a full collection every second or two, each
# stopping every push for 200 ms and more on a 2-core machine (bench/README.md, push_latency).
gc.freeze()
gc.set_threshold(10_000, 10, 10)
