"""HTTP through Django, websockets through Channels (R-UI2)."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "skillrunner.settings")
django_asgi = get_asgi_application()

from channels.routing import ProtocolTypeRouter  # noqa: E402  (needs Django set up)

from runs.routing import websocket_application  # noqa: E402

application = ProtocolTypeRouter({"http": django_asgi, "websocket": websocket_application})
