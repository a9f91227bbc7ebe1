"""Fixtures of the notification suite: a local webhook receiver the SSRF guard lets through."""

from __future__ import annotations

import pytest

from tests.support.webhook_receiver import WebhookReceiver


@pytest.fixture
def allow_private(settings):
    """Tests deliver to 127.0.0.1, which the SSRF guard refuses unless told otherwise (R-NT2)."""
    settings.SKILLRUNNER_WEBHOOK_ALLOW_PRIVATE = True


@pytest.fixture
def receiver(allow_private):
    with WebhookReceiver() as server:
        yield server
