from django.urls import path

from approvals.consumers import ConsoleConsumer

websocket_urlpatterns = [path("ws/console/", ConsoleConsumer.as_asgi())]
