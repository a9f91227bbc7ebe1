"""Helpers of the notification suite."""

from __future__ import annotations

import socket


def fake_dns(monkeypatch, answers: dict[str, list[str] | None]) -> list[str]:
    """Replace the resolver at its boundary for the names in `answers` (None: no such name);
    returns the names looked up. Anything else (IP literals) goes to the real resolver."""
    asked: list[str] = []
    real = socket.getaddrinfo

    def getaddrinfo(host, port, *args, **kwargs):
        if host not in answers:
            return real(host, port, *args, **kwargs)
        asked.append(host)
        if answers[host] is None:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return [
            (socket.AF_INET6 if ":" in ip else socket.AF_INET, socket.SOCK_STREAM, 6, "", (ip, port))
            for ip in answers[host]
        ]

    monkeypatch.setattr("notifications.destinations.socket.getaddrinfo", getaddrinfo)
    return asked
