"""Links from outside a request (issue 30): emails and webhook payloads point at the site as its
users reach it, SKILLRUNNER_PUBLIC_URL, or where `manage.py serve` listens when that is unset."""

from __future__ import annotations

import socket

import pytest

from kernel.links import public_url, run_page_url, served_url, use_served_url


def test_links_start_with_the_public_address(settings):
    settings.SKILLRUNNER_PUBLIC_URL = "https://runner.example.org/tools"
    assert public_url("/inbox/") == "https://runner.example.org/tools/inbox/"
    assert run_page_url("0b6e") == "https://runner.example.org/tools/runs/0b6e/"


def test_without_one_they_fall_back_to_make_runs_address(settings):
    settings.SKILLRUNNER_PUBLIC_URL = ""
    assert public_url("/inbox/") == "http://127.0.0.1:8000/inbox/"


@pytest.mark.parametrize(
    "host,port,expected",
    [
        ("127.0.0.1", 8010, "http://127.0.0.1:8010"),
        ("localhost", 9000, "http://localhost:9000"),
        ("::1", 8000, "http://[::1]:8000"),
        ("[::1]", 8000, "http://[::1]:8000"),
        ("runner.lan", 80, "http://runner.lan:80"),
    ],
)
def test_the_address_serve_listens_on(host, port, expected):
    assert served_url(host, port) == expected


def test_a_wildcard_bind_is_reached_by_the_machines_name():
    assert served_url("0.0.0.0", 8000) == f"http://{socket.gethostname()}:8000"
    assert served_url("::", 8000) == f"http://{socket.gethostname()}:8000"


def test_serve_sets_its_own_address_only_when_none_is_configured(settings):
    settings.SKILLRUNNER_PUBLIC_URL = ""
    use_served_url("127.0.0.1", 8010)
    assert public_url("/") == "http://127.0.0.1:8010/"
    settings.SKILLRUNNER_PUBLIC_URL = "https://runner.example.org"
    use_served_url("127.0.0.1", 8010)
    assert public_url("/") == "https://runner.example.org/"


def test_a_public_address_that_is_not_http_is_refused_at_start():
    import os
    import subprocess
    import sys

    from tests.support.service_processes import REPO

    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "skillrunner.settings",
        "SKILLRUNNER_PUBLIC_URL": "runner.example.org",
    }
    done = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "SKILLRUNNER_PUBLIC_URL must start with http:// or https://" in done.stderr
