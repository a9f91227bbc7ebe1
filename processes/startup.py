"""The explicit startup step of an installation: every entry point takes it before anything else
(`manage.py` for each command, `serve` and `worker` among them; `skillrunner.asgi` for a web
started alone, as README's "Scaling out" starts it; the test suite), so importing the settings
writes nothing.

It creates the data directory (private to the service user) and, when no SECRET_KEY is
configured, the per-installation key kept with the data. A process that cannot do either ends
with one line saying why (R-OP12): a web that started without its key would answer every request
with a 500, forever.
"""

from __future__ import annotations

import os
import secrets
import sys
from pathlib import Path

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from processes.memory import limit_malloc_arenas

SECRET_KEY_FILE = "secret_key"


def read_secret_key(data_dir: Path) -> str:
    """The installation's generated key, or "" before `prepare_installation` created it (or when
    it cannot be read: `prepare_installation` then says why)."""
    try:
        return (data_dir / SECRET_KEY_FILE).read_text(encoding="utf-8").strip()
    except OSError:
        return ""


def _private_dir(path: Path) -> None:
    path.mkdir(mode=0o700, parents=True, exist_ok=True)


def _create_secret_key(path: Path) -> str:
    """Write a new key atomically with mode 0600; if another process got there first, keep its key."""
    staging = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    fd = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(secrets.token_urlsafe(50))
            handle.flush()
            os.fsync(handle.fileno())
        try:
            os.link(staging, path)  # never replaces: the first key written stays the key
        except FileExistsError:
            pass
    finally:
        staging.unlink(missing_ok=True)
    return path.read_text(encoding="utf-8").strip()


def prepare_installation() -> None:
    """Create what the settings point at; idempotent and safe to run in several processes."""
    data_dir = Path(settings.DATA_DIR)
    _private_dir(data_dir)
    _private_dir(Path(settings.STATIC_ROOT))  # whitenoise expects it; the assets come from the finders
    try:
        configured = bool(settings.SECRET_KEY)
    except ImproperlyConfigured:  # empty: Django refuses to hand it out
        configured = False
    if not configured:
        settings.SECRET_KEY = read_secret_key(data_dir) or _create_secret_key(data_dir / SECRET_KEY_FILE)


# Imported by libraries whenever they are installed, for what the service never does: DRF imports
# requests for its test client and pygments to highlight its browsable API's docs, httpx its
# command line (click, rich, pygments) and autobahn click to colour its log lines. `make test`
# installs them beside the service, `make run` alone does not. pyOpenSSL comes with daphne's
# Twisted for TLS, which `serve` never speaks: it listens on plain TCP, behind
# whatever terminates TLS, and Twisted and autobahn import it only where they can.
UNUSED_WHEN_INSTALLED = ("requests", "pygments", "httpx._main", "click", "OpenSSL")


def keep_unused_libraries_out() -> None:
    """Mark as missing what the service imports only because it is installed, so it never is: of
    the heap all the service's processes share (the idle tree's PSS), 5 MiB for the test tools'
    libraries, 1.5 for OpenSSL, and on SQLite 6 MiB for psycopg, which DRF imports through
    django.contrib.postgres (rest_framework.compat) though nothing talks to PostgreSQL; DRF then
    leaves out the serializer fields of PostgreSQL's own types, which no model here has. Autobahn's
    native WebSocket helpers (NVX) are turned off too: they load cffi and its C parser (1.5 MiB)
    to check and unmask the frames a browser sends, a reply of a few hundred bytes. For
    `manage.py` only: the test suite uses them."""
    for name in UNUSED_WHEN_INSTALLED:  # before the settings, which import httpx (the relay)
        sys.modules.setdefault(name, None)  # type: ignore[arg-type]  # None: an import raises ImportError
    if settings.DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
        sys.modules.setdefault("psycopg", None)  # type: ignore[arg-type]
    os.environ.setdefault("AUTOBAHN_USE_NVX", "0")


def start_process() -> None:
    """The first step of every entry point: what it creates is private to the service user (its
    children inherit the umask), its threads share few malloc arenas, and the installation is
    prepared, or the process refuses to start with one line (R-OP12)."""
    os.umask(0o077)
    limit_malloc_arenas()
    try:
        prepare_installation()
    except OSError as exc:
        sys.exit(f"skillrunner: cannot prepare the data directory: {exc}; not starting")
