"""The one family of errors with a stable code: the API and the websocket render them as
{"detail": {"code", "message", ...}} (kernel.api_errors), pages as form errors."""

from __future__ import annotations

from typing import Any


class ApplicationError(Exception):
    status_code = 400

    def __init__(self, code: str, message: str, *, status_code: int | None = None, **extra: Any):
        super().__init__(message)
        self.code = code
        self.message = message
        if status_code is not None:
            self.status_code = status_code
        self.extra = extra

    def as_detail(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, **self.extra}

    def messages(self) -> list[str]:
        """Lines for a page; an error listing its problems (`errors`) gives one line each."""
        details = self.extra.get("errors") or [self.message]
        return [f"{detail} ({self.code})" for detail in details]


class NotFound(ApplicationError):
    status_code = 404


class Conflict(ApplicationError):
    status_code = 409


class OverUserLimit(ApplicationError):
    """429: the user already holds the most of something one user may have (R-FS1, R-FS2)."""

    status_code = 429

    def __init__(self, code: str, held: str, remedy: str, **extra: Any):
        super().__init__(code, f"you have {held}, the most one user may have; {remedy}", **extra)
