"""A backing service away is a 503 SERVICE_UNAVAILABLE the client may retry (SPEC §8, R-OP2): the
database's errors, and Redis's wherever redis-py is loaded (kernel.api_errors looks it up
instead of importing it)."""

from __future__ import annotations

import pytest
import redis.exceptions
from django.db import InterfaceError, OperationalError

from kernel.api_errors import exception_handler


@pytest.mark.parametrize(
    "error",
    [
        OperationalError("server closed the connection"),
        InterfaceError("connection already closed"),
        redis.exceptions.ConnectionError("Error 111 connecting to 127.0.0.1:6379"),
        redis.exceptions.TimeoutError(),
    ],
)
def test_a_backing_service_away_is_503_to_retry(error):
    response = exception_handler(error, {})
    assert response.status_code == 503
    assert response.data["detail"]["code"] == "SERVICE_UNAVAILABLE"


def test_another_connection_error_is_not_taken_for_one():
    """The builtin ConnectionError (a broken socket of the app's own) is not Redis away."""
    assert exception_handler(ConnectionError("reset by peer"), {}) is None
