"""The signature header of webhook deliveries (R-NT1): the timestamped scheme of well-known
payment webhooks, so a receiver can check both who sent a body and how old it is."""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time

SIGNATURE_HEADER = "X-SkillRunner-Signature"
EVENT_HEADER = "X-SkillRunner-Event"
DELIVERY_HEADER = "X-SkillRunner-Delivery"


def new_secret() -> str:
    return "whsec_" + secrets.token_urlsafe(32)


def signature(secret: str, body: bytes, timestamp: int | None = None) -> str:
    """`t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<raw body>")>`."""
    t = int(time.time()) if timestamp is None else timestamp
    digest = hmac.new(secret.encode(), f"{t}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={t},v1={digest}"
