"""Settings come from the environment (R-OP4); every variable is documented in the README.

The embedded default needs no server: SQLite in WAL mode under SKILLRUNNER_DATA_DIR and the
django-q2 ORM broker. DATABASE_URL and REDIS_URL scale the same code out (R-OP2).
"""

import ipaddress
from pathlib import Path

import environ
from django.core.exceptions import ImproperlyConfigured

from engines.registry import ENGINE_NAMES
from processes.startup import read_secret_key

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()


def _positive_int(name: str, default: int) -> int:
    value = env.int(name, default=default)
    if value <= 0:
        raise ImproperlyConfigured(f"{name} must be a positive integer, got {value}")
    return value


def _non_negative_int(name: str, default: int) -> int:
    value = env.int(name, default=default)
    if value < 0:
        raise ImproperlyConfigured(f"{name} must be 0 (no limit) or a positive integer, got {value}")
    return value


def _networks(name: str) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    networks = []
    for entry in env.list(name, default=[]):
        try:
            networks.append(ipaddress.ip_network(entry, strict=False))
        except ValueError:
            raise ImproperlyConfigured(f"{name} must list IP addresses or networks (CIDR), got {entry!r}") from None
    return tuple(networks)


def _non_negative_seconds(name: str, default: float) -> float:
    raw = env.str(name, default=str(default))
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not 0 <= value < float("inf"):  # also refuses nan
        raise ImproperlyConfigured(f"{name} must be a number of seconds, 0 or more, got {raw!r}")
    return value


DATA_DIR = Path(env.str("SKILLRUNNER_DATA_DIR", default=str(BASE_DIR / "data"))).resolve()
DEBUG = env.bool("DEBUG", default=False)
# Without SECRET_KEY, the per-installation key kept with the data (so `make run` works out of
# the box while nothing secret is ever committed); processes.startup creates it, not this import.
SECRET_KEY = env.str("SECRET_KEY", default="") or read_secret_key(DATA_DIR)

ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["127.0.0.1", "localhost", "[::1]"])
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])

# One switch for HTTPS behind a TLS-terminating proxy (R-FS3): the proxy's X-Forwarded-Proto is
# trusted, plain-HTTP requests are redirected, cookies are sent over HTTPS only, and browsers are
# told to use HTTPS for a year (HSTS). Only behind a proxy that sets that header itself.
SKILLRUNNER_HTTPS = env.bool("SKILLRUNNER_HTTPS", default=False)
if SKILLRUNNER_HTTPS:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_SSL_REDIRECT = True
    # Health probes come from the proxy or the orchestrator over plain HTTP.
    SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$", r"^v1/system/"]
    SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = True
    SECURE_HSTS_SECONDS = env.int("SECURE_HSTS_SECONDS", default=365 * 24 * 3600)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = env.bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", default=False)
SESSION_COOKIE_HTTPONLY = True

# Not "daphne": its app only serves `manage.py runserver` (the web is `python -m daphne` or
# `manage.py serve`), and importing it at every start (Twisted) cost each worker and management
# command a third of its start-up CPU.
INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "channels",
    "django_q",
    "accounts",
    "skills",
    "enginehost",
    "runs",
    "worker",
    "notifications",
    "live",
    "upstream",
    "metrics",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "kernel.middleware.ContentSecurityPolicyMiddleware",
    "kernel.middleware.ApiJsonErrorsMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "accounts.local_mode.LocalModeMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "kernel.middleware.PageMethodNotAllowedMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Before any view reads the body. The chain runs in sync mode (skillrunner.asgi), so the
    # order does not decide how often a request hops between thread and event loop.
    "kernel.middleware.RequestSizeLimitMiddleware",
]

ROOT_URLCONF = "skillrunner.urls"
ASGI_APPLICATION = "skillrunner.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "runs.context_processors.inbox",
                "kernel.context_processors.sandbox",
                "kernel.context_processors.local_mode",
            ],
        },
    },
]

# How many threads run a web process's requests (skillrunner.asgi.RequestThreads), each with a
# database connection of its own: on SQLite its own file handle, on PostgreSQL one borrowed from
# the pool. 4: requests are mostly CPU under one GIL, and a 50-run burst at cap 16 went through at
# 29.5 runs/s with 4 threads against 21.5 with 16 on SQLite, where every write also waits for one
# lock, and with about 5 MiB less held after it on PostgreSQL (docs/benchmarks.md).
DATABASE_URL = env.str("DATABASE_URL", default="")
SKILLRUNNER_WEB_DB_CONNECTIONS = _positive_int("SKILLRUNNER_WEB_DB_CONNECTIONS", 4)
# The PostgreSQL pool's room beyond the request threads, for the process's other threads that
# query: the one of the websockets and event streams (channels' database_sync_to_async), the
# watcher's (live.watcher), and tests' own threads.
WEB_DB_POOL_ROOM = 4
# Seconds a web request waits for a pooled PostgreSQL connection before answering 503.
WEB_DB_CONNECTION_WAIT_SECONDS = 3
# Seconds a database connection is kept by `manage.py worker` (it sets this on its connections),
# and on SQLite by the web process too.
SKILLRUNNER_WORKER_CONN_MAX_AGE = 60
if DATABASE_URL:
    DATABASES = {"default": env.db_url_config(DATABASE_URL)}
    if DATABASES["default"]["ENGINE"] != "django.db.backends.postgresql":
        raise ImproperlyConfigured("DATABASE_URL must point at PostgreSQL (postgres://...)")
    # Persistent connections only in `manage.py worker`, whose processes and threads live long
    # (it switches them on itself). In the web, a kept connection belongs to a request thread,
    # and a burst makes threads beyond the 16 skillrunner.asgi keeps: when each request had a
    # thread of its own, 50 concurrent requests left 64 connections open and a few such bursts
    # exhausted max_connections ("too many clients", 500s). The web borrows from a pool instead.
    # `?conn_max_age=N` overrides both.
    if "CONN_MAX_AGE" in DATABASES["default"]:
        SKILLRUNNER_WORKER_CONN_MAX_AGE = DATABASES["default"]["CONN_MAX_AGE"]
    DATABASES["default"].setdefault("CONN_MAX_AGE", 0)
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
    # Parameters bound by the server and statements prepared once per connection (psycopg
    # prepares a statement at its 5th use): a status GET took 1.2 ms in process instead of 3.6–4.6,
    # no longer interpolating its parameters in Python and planning its six-table join each time
    # (issue #16). Django turns both off by default for transaction-pooling proxies (PgBouncer),
    # which this service does not support in front of PostgreSQL (README).
    DATABASES["default"].setdefault("OPTIONS", {}).update(server_side_binding=True, prepare_threshold=5)
    if not DATABASES["default"]["CONN_MAX_AGE"]:
        # The web process borrows connections from a pool: opening one cost 2-3 ms of every
        # request, and the pool bounds how many requests in flight hold one. The rest wait for
        # one, at most `timeout` s: also how long a request takes to answer 503 while the database
        # is away, so it is short. The worker keeps its own connections (it forks; pools do not).
        DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
            "min_size": 2,
            "max_size": SKILLRUNNER_WEB_DB_CONNECTIONS + WEB_DB_POOL_ROOM,
            "timeout": WEB_DB_CONNECTION_WAIT_SECONDS,
        }
else:
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": DATA_DIR / "skillrunner.sqlite3",
            "OPTIONS": {
                # IMMEDIATE takes the write lock at BEGIN, so concurrent writers queue on the
                # busy timeout instead of failing with "database is locked" mid-transaction.
                "transaction_mode": "IMMEDIATE",
                "timeout": 30,
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
            },
            # Kept, by the worker (django-q2's ORM broker would reopen one at every poll) and by
            # the web, whose request threads are kept too (skillrunner.asgi), each with its own
            # connection: opening one took 0.8 ms of every request. A connection is a file handle
            # here, not a server's slot, so there is no pool to bound them as on PostgreSQL.
            "CONN_MAX_AGE": SKILLRUNNER_WORKER_CONN_MAX_AGE,
        }
    }

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL = env.str("REDIS_URL", default="")
# Separates installations (or test runs) sharing one Redis: queue and channel-layer prefix.
SKILLRUNNER_QUEUE_NAME = env.str("SKILLRUNNER_QUEUE_NAME", default="skillrunner")
if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {
                # redis-py stops reading after 5 s by default, and channels-redis waits up to 5 s
                # for a message in one blocking pop: an idle web process's receive failed every
                # 5 s or so, and with it whichever socket had started it.
                "hosts": [{"address": REDIS_URL, "socket_timeout": 30}],
                "prefix": SKILLRUNNER_QUEUE_NAME,
            },
        }
    }
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": REDIS_URL,
            "KEY_PREFIX": SKILLRUNNER_QUEUE_NAME,
        }
    }
else:
    # No cross-process layer on the embedded default: consumers poll the event table instead.
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    if DATABASES["default"]["ENGINE"].endswith("sqlite3"):
        # The cache holds rate-limit and failed-login counters, which only the web process
        # reads, and the embedded default has one. In the database they cost every POST and
        # reply four statements and SQLite's write lock, which the worker's turns wait on (#16).
        CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    else:  # PostgreSQL without Redis: web processes may be several, and share the counters here
        CACHES = {
            "default": {
                "BACKEND": "django.core.cache.backends.db.DatabaseCache",
                "LOCATION": "skillrunner_cache",
            }
        }

# django-q2's sentinel saved its cluster's status to its cache every guard cycle, for
# `qmonitor`/`qinfo`, which nothing here reads: 1.5 ms of CPU every 2 s on the database cache, a
# fifth of the idle service's CPU (issue #16). The task process (worker.threadpool) saves none,
# and whatever else would gets a cache that keeps nothing.
CACHES["cluster_status"] = {"BACKEND": "django.core.cache.backends.dummy.DummyCache"}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
LOGIN_URL = "login"
# Failed logins from one address, or for one username, before 429 until the window ends (R-FS1).
SKILLRUNNER_LOGIN_MAX_FAILURES = _positive_int("SKILLRUNNER_LOGIN_MAX_FAILURES", 10)
SKILLRUNNER_LOGIN_WINDOW_SECONDS = _positive_int("SKILLRUNNER_LOGIN_WINDOW_SECONDS", 300)
LOGIN_REDIRECT_URL = "ui:run-list"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
# Times to the second with their zone, in the admin too (localisation would win over DATETIME_FORMAT).
FORMAT_MODULE_PATH = ["kernel.formats"]
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = DATA_DIR / "staticfiles"
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = True

# Upload limits: a request body over these answers 413 (R-SK5, SPEC §8).
SKILLRUNNER_MAX_UPLOAD_BYTES = _positive_int("SKILLRUNNER_MAX_UPLOAD_BYTES", 50 * 1024 * 1024)
SKILLRUNNER_MAX_JSON_BODY_BYTES = _positive_int("SKILLRUNNER_MAX_JSON_BODY_BYTES", 2 * 1024 * 1024)
DATA_UPLOAD_MAX_MEMORY_SIZE = SKILLRUNNER_MAX_JSON_BODY_BYTES
# Files sent with a reply (R-UP6), announced by the handshake (R-UP3); one request holds them all.
SKILLRUNNER_REPLY_MAX_FILES = _positive_int("SKILLRUNNER_REPLY_MAX_FILES", 8)
SKILLRUNNER_REPLY_MAX_TOTAL_BYTES = _positive_int(
    "SKILLRUNNER_REPLY_MAX_TOTAL_BYTES", min(25 * 1024 * 1024, SKILLRUNNER_MAX_UPLOAD_BYTES)
)
SKILLRUNNER_REPLY_MAX_FILE_BYTES = _positive_int(
    "SKILLRUNNER_REPLY_MAX_FILE_BYTES", min(10 * 1024 * 1024, SKILLRUNNER_REPLY_MAX_TOTAL_BYTES)
)
if not SKILLRUNNER_REPLY_MAX_FILE_BYTES <= SKILLRUNNER_REPLY_MAX_TOTAL_BYTES <= SKILLRUNNER_MAX_UPLOAD_BYTES:
    raise ImproperlyConfigured(
        "reply file limits must keep SKILLRUNNER_REPLY_MAX_FILE_BYTES <= SKILLRUNNER_REPLY_MAX_TOTAL_BYTES "
        "<= SKILLRUNNER_MAX_UPLOAD_BYTES"
    )
DATA_UPLOAD_MAX_NUMBER_FIELDS = 200
FILE_UPLOAD_MAX_MEMORY_SIZE = 2 * 1024 * 1024
SKILLRUNNER_ZIP_MAX_MEMBERS = _positive_int("SKILLRUNNER_ZIP_MAX_MEMBERS", 2000)
SKILLRUNNER_ZIP_MAX_TOTAL_BYTES = _positive_int("SKILLRUNNER_ZIP_MAX_TOTAL_BYTES", 200 * 1024 * 1024)
SKILLRUNNER_ZIP_MAX_RATIO = _positive_int("SKILLRUNNER_ZIP_MAX_RATIO", 200)

# Execution limits.
SKILLRUNNER_MAX_CONCURRENT_TURNS = _positive_int("SKILLRUNNER_MAX_CONCURRENT_TURNS", 4)
SKILLRUNNER_MAX_QUEUED_RUNS = _positive_int("SKILLRUNNER_MAX_QUEUED_RUNS", 256)
# By default one user can never take every slot, so another's run always finds one.
SKILLRUNNER_USER_MAX_RUNNING = _positive_int(
    "SKILLRUNNER_USER_MAX_RUNNING", max(1, SKILLRUNNER_MAX_CONCURRENT_TURNS - 1)
)
# A cache hit copies the earlier run's artifacts; larger ones are not reused, the run executes (R-FS2).
SKILLRUNNER_CACHE_MAX_COPY_BYTES = _positive_int("SKILLRUNNER_CACHE_MAX_COPY_BYTES", 100 * 1024 * 1024)
# Retention: finished runs' folders (run dir, records, engine home) are removed this many days
# after they finished, by an hourly django-q2 schedule; 0 keeps them forever. With
# SKILLRUNNER_RUN_RETENTION_DELETE_ROWS the runs' rows (events, interactions) go too.
SKILLRUNNER_RUN_RETENTION_DAYS = env.int("SKILLRUNNER_RUN_RETENTION_DAYS", default=0)
if SKILLRUNNER_RUN_RETENTION_DAYS < 0:
    raise ImproperlyConfigured(
        f"SKILLRUNNER_RUN_RETENTION_DAYS must be 0 (keep forever) or a number of days, got {SKILLRUNNER_RUN_RETENTION_DAYS}"
    )
SKILLRUNNER_RUN_RETENTION_DELETE_ROWS = env.bool("SKILLRUNNER_RUN_RETENTION_DELETE_ROWS", default=False)
# Each log text in a /logs JSON answer; the whole log streams from `?stream=` (R-FS2).
SKILLRUNNER_LOG_TEXT_MAX_BYTES = _positive_int("SKILLRUNNER_LOG_TEXT_MAX_BYTES", 1024 * 1024)
SKILLRUNNER_DEFAULT_HARD_TIMEOUT = _positive_int("SKILLRUNNER_DEFAULT_HARD_TIMEOUT", 1200)
SKILLRUNNER_MAX_HARD_TIMEOUT = _positive_int("SKILLRUNNER_MAX_HARD_TIMEOUT", 6 * 3600)
SKILLRUNNER_DEFAULT_SESSION_TIMEOUT = _positive_int("SKILLRUNNER_DEFAULT_SESSION_TIMEOUT", 1200)
# A waiting sticky run holds its slot this long at most (R-FS1).
SKILLRUNNER_MAX_SESSION_TIMEOUT = _positive_int("SKILLRUNNER_MAX_SESSION_TIMEOUT", 6 * 3600)
# Fair share (R-FS1): one user's queued runs (uploads awaited included), and the slots one user
# holds at once (running turns and waits that keep their process).
SKILLRUNNER_USER_MAX_QUEUED = _positive_int("SKILLRUNNER_USER_MAX_QUEUED", 64)
# Live connections (websockets and event streams together) one user may hold open at once (R-FS2).
SKILLRUNNER_USER_MAX_STREAMS = _positive_int("SKILLRUNNER_USER_MAX_STREAMS", 20)
# Webhook endpoints one user may register (R-FS2): each status change of their runs is one
# delivery per endpoint. Runs' callback_url endpoints do not count.
SKILLRUNNER_USER_MAX_WEBHOOKS = _positive_int("SKILLRUNNER_USER_MAX_WEBHOOKS", 20)
# A run may name only a model its engine's catalogue lists (GET /v1/engines/{engine}/models: the
# engine's known models and the operator's SKILLRUNNER_<ENGINE>_MODEL); true lets any name through
# to the CLI, for a provider whose models the catalogue does not know (R-UP9).
SKILLRUNNER_ALLOW_ANY_MODEL = env.bool("SKILLRUNNER_ALLOW_ANY_MODEL", default=False)
# A run still waiting for its upload after this long fails with UPLOAD_TIMEOUT (R-FS1).
SKILLRUNNER_UPLOAD_TIMEOUT_SECONDS = _positive_int("SKILLRUNNER_UPLOAD_TIMEOUT_SECONDS", 3600)
# Temporary folders a killed process left behind (a reply's or a package's staging, a run's upload
# staging) are removed by the hourly sweep once this old (runs.sweeps); a request still reading
# its body is younger.
SKILLRUNNER_TEMP_MAX_AGE_SECONDS = _positive_int("SKILLRUNNER_TEMP_MAX_AGE_SECONDS", 6 * 3600)
SKILLRUNNER_KILL_GRACE_SECONDS = env.float("SKILLRUNNER_KILL_GRACE_SECONDS", default=5.0)
# R-OP10: a stopping worker's turns get this long to finish before they fail as interrupted; 0
# stops them at once.
SKILLRUNNER_DRAIN_SECONDS = _non_negative_seconds("SKILLRUNNER_DRAIN_SECONDS", 30.0)
# Upper bound on building one skill's runtime.dependencies environment with uv (R-SK7).
SKILLRUNNER_DEPENDENCY_BUILD_TIMEOUT = _positive_int("SKILLRUNNER_DEPENDENCY_BUILD_TIMEOUT", 300)
SKILLRUNNER_HEARTBEAT_SECONDS = env.float("SKILLRUNNER_HEARTBEAT_SECONDS", default=10.0)
# Live activity events one turn may write before a single activity_truncated event (R-AC2).
SKILLRUNNER_ACTIVITY_MAX_EVENTS = _positive_int("SKILLRUNNER_ACTIVITY_MAX_EVENTS", 500)
# Output repair (R-RP1): the most rounds a run may ask for in max_repair_rounds; 0 switches repair off.
SKILLRUNNER_MAX_REPAIR_ROUNDS = env.int("SKILLRUNNER_MAX_REPAIR_ROUNDS", default=5)
if SKILLRUNNER_MAX_REPAIR_ROUNDS < 0:
    raise ImproperlyConfigured(f"SKILLRUNNER_MAX_REPAIR_ROUNDS must be 0 or more, got {SKILLRUNNER_MAX_REPAIR_ROUNDS}")

SKILLRUNNER_BUNDLED_SKILLS_DIR = BASE_DIR / "skills" / "bundled"

# Engines (R-EN4, R-EN8): binary, provider endpoint, key and default model per engine.
_ENGINE_CLI_BIN = BASE_DIR / "engines" / "cli" / "node_modules" / ".bin"
SKILLRUNNER_ENGINES = {
    name: {
        "binary": env.str(f"SKILLRUNNER_{name.upper()}_BIN", default=""),
        "base_url": env.str(f"SKILLRUNNER_{name.upper()}_BASE_URL", default=""),
        "api_key": env.str(f"SKILLRUNNER_{name.upper()}_API_KEY", default=""),
        "model": env.str(f"SKILLRUNNER_{name.upper()}_MODEL", default=""),
    }
    for name in ENGINE_NAMES
}
SKILLRUNNER_ENGINE_CLI_BIN_DIR = _ENGINE_CLI_BIN

# The agent sandbox (SPEC §11): bubblewrap around every engine turn, per-turn limits, network.
SKILLRUNNER_SANDBOX = env.str("SKILLRUNNER_SANDBOX", default="bwrap")
if SKILLRUNNER_SANDBOX not in ("bwrap", "off"):
    raise ImproperlyConfigured(f"SKILLRUNNER_SANDBOX must be bwrap or off, got {SKILLRUNNER_SANDBOX!r}")
# Single-user local mode (R-UP1): upstream's clients send no credentials, so a request without
# any acts as one local user. That is safe only when nothing but this machine's own user can
# reach the service, and no agent can: loopback only, agents behind the provider relay.
SKILLRUNNER_LOCAL_MODE = env.bool("SKILLRUNNER_LOCAL_MODE", default=False)
SKILLRUNNER_LOCAL_USER = env.str("SKILLRUNNER_LOCAL_USER", default="local")
SKILLRUNNER_SANDBOX_NETWORK = env.str(
    "SKILLRUNNER_SANDBOX_NETWORK", default="provider" if SKILLRUNNER_LOCAL_MODE else "open"
)
if SKILLRUNNER_SANDBOX_NETWORK not in ("open", "provider"):
    raise ImproperlyConfigured(
        f"SKILLRUNNER_SANDBOX_NETWORK must be open or provider, got {SKILLRUNNER_SANDBOX_NETWORK!r}"
    )
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")
if SKILLRUNNER_LOCAL_MODE:
    _refusal = "SKILLRUNNER_LOCAL_MODE=true serves requests without credentials, so"
    if SKILLRUNNER_SANDBOX == "off" or SKILLRUNNER_SANDBOX_NETWORK != "provider":
        raise ImproperlyConfigured(
            f"{_refusal} agents must not reach the service: it needs SKILLRUNNER_SANDBOX=bwrap and "
            "SKILLRUNNER_SANDBOX_NETWORK=provider (the default in local mode); unset both or set them so"
        )
    if not SKILLRUNNER_LOCAL_USER.strip():
        raise ImproperlyConfigured("SKILLRUNNER_LOCAL_USER must name a user")
    if not set(ALLOWED_HOSTS) <= set(LOOPBACK_HOSTS):
        raise ImproperlyConfigured(
            f"{_refusal} it answers loopback names only: ALLOWED_HOSTS must be among {', '.join(LOOPBACK_HOSTS)}"
        )
SKILLRUNNER_SANDBOX_MEMORY_MB = _positive_int("SKILLRUNNER_SANDBOX_MEMORY_MB", 4096)
SKILLRUNNER_SANDBOX_MAX_PROCESSES = _positive_int("SKILLRUNNER_SANDBOX_MAX_PROCESSES", 512)
SKILLRUNNER_SANDBOX_MAX_FILE_MB = _positive_int("SKILLRUNNER_SANDBOX_MAX_FILE_MB", 1024)
SKILLRUNNER_SANDBOX_MAX_OPEN_FILES = _positive_int("SKILLRUNNER_SANDBOX_MAX_OPEN_FILES", 4096)
SKILLRUNNER_SANDBOX_RUN_DIR_MB = _positive_int("SKILLRUNNER_SANDBOX_RUN_DIR_MB", 2048)
SKILLRUNNER_SANDBOX_TMP_MB = _positive_int("SKILLRUNNER_SANDBOX_TMP_MB", 512)
# Spend limits at the provider relay (R-SB9), in model tokens as the provider reports them; 0 is
# no limit. A run's `max_tokens` runtime option may lower the first; a user's own daily limit
# (admin: spend limits) replaces the second.
SKILLRUNNER_RUN_MAX_TOKENS = _non_negative_int("SKILLRUNNER_RUN_MAX_TOKENS", 0)
SKILLRUNNER_USER_MAX_TOKENS_PER_DAY = _non_negative_int("SKILLRUNNER_USER_MAX_TOKENS_PER_DAY", 0)
# Model calls one run may make per minute (a runaway loop's brake; 0 is no limit).
SKILLRUNNER_RUN_MAX_MODEL_CALLS_PER_MINUTE = _non_negative_int("SKILLRUNNER_RUN_MAX_MODEL_CALLS_PER_MINUTE", 240)

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "accounts.authentication.HashedTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
        "accounts.authentication.PasswordBasicAuthentication",
        "accounts.local_mode.LocalUserAuthentication",  # last: only a request without credentials
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PARSER_CLASSES": [
        "kernel.parsers.SafeJSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "kernel.api_errors.exception_handler",
    "DEFAULT_THROTTLE_RATES": {
        "run_create": env.str("SKILLRUNNER_RATE_RUN_CREATE", default="120/min"),
        "interaction_reply": env.str("SKILLRUNNER_RATE_REPLY", default="240/min"),
        "skill_install": env.str("SKILLRUNNER_RATE_SKILL_INSTALL", default="30/min"),
        "settings_change": env.str("SKILLRUNNER_RATE_SETTINGS", default="60/min"),
    },
    "UNAUTHENTICATED_USER": None,
}

SPECTACULAR_SETTINGS = {
    "TITLE": "Skill Runner API",
    "DESCRIPTION": "Run agent skills through agent CLIs as jobs.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
}

# django-q2 delivers at least once; a run is claimed atomically before its turn, so a
# redelivered task is a no-op (R-LC14). A task is one resumable turn, or a whole sticky
# conversation that holds its process; `timeout` bounds that, `retry` stays above it, and our
# own reconciler, not redelivery, handles workers that die.
# Successful tasks are not stored (save_limit -1): a run keeps its own events and result, and
# with a positive limit django-q2's single monitor process re-reads every stored success row
# (select_for_update, unpickling args and result) for each finished task, which grew with the
# table and serialised all SQLite writers behind it (docs/benchmarks.md). Failures are kept.
SKILLRUNNER_MAX_TASK_SECONDS = _positive_int("SKILLRUNNER_MAX_TASK_SECONDS", 2 * 24 * 3600)
Q_CLUSTER = {
    "name": SKILLRUNNER_QUEUE_NAME,
    # Threads of the cluster's one task process (worker.threadpool): one per slot, one more for
    # the other tasks (webhooks, emails, the hourly schedules).
    "workers": SKILLRUNNER_MAX_CONCURRENT_TURNS + 1,
    "recycle": 500,
    "timeout": SKILLRUNNER_MAX_TASK_SECONDS,
    "retry": SKILLRUNNER_MAX_TASK_SECONDS + 3600,
    "max_attempts": 1,
    "ack_failures": True,
    "save_limit": -1,
    "queue_limit": SKILLRUNNER_MAX_CONCURRENT_TURNS * 2,
    # The embedded default's broker waits for a wake-up instead of polling (processes/queue_broker.py);
    # 0 turns off django-q2's own fixed sleep between empty queries. The Redis broker blocks.
    "poll": 0,
    # The task process's main thread (worker.threadpool: its slots' timeouts and threads replaced)
    # wakes this often even when idle; task timeouts here are days, so 2 s instead of django-q2's
    # 0.5 s costs nothing.
    "guard_cycle": 2,
    "catch_up": False,
    "cache": "cluster_status",
    "label": "Task queue",
}
if REDIS_URL:
    Q_CLUSTER["redis"] = REDIS_URL
else:
    Q_CLUSTER["orm"] = "default"
    Q_CLUSTER["broker_class"] = "processes.queue_broker.WakeableORM"

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"redact": {"()": "kernel.logging.RedactSecretsFilter"}},
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain", "filters": ["redact"]}},
    "root": {"handlers": ["console"], "level": env.str("LOG_LEVEL", default="INFO")},
    # httpx (the provider relay) would log every model call at INFO.
    "loggers": {"django-q": {"level": "WARNING"}, "daphne": {"level": "WARNING"}, "httpx": {"level": "WARNING"}},
}

# Notifications (R-NT1–R-NT3). Webhooks go to public addresses only unless ALLOW_PRIVATE (tests,
# single-host setups); each attempt has this timeout per network phase; retries wait the base,
# then twice as long each time (README: the schedule).
SKILLRUNNER_WEBHOOK_ALLOW_PRIVATE = env.bool("SKILLRUNNER_WEBHOOK_ALLOW_PRIVATE", default=False)
SKILLRUNNER_WEBHOOK_TIMEOUT_SECONDS = env.float("SKILLRUNNER_WEBHOOK_TIMEOUT_SECONDS", default=5.0)
SKILLRUNNER_WEBHOOK_RETRY_BASE_SECONDS = env.float("SKILLRUNNER_WEBHOOK_RETRY_BASE_SECONDS", default=30.0)
if SKILLRUNNER_WEBHOOK_TIMEOUT_SECONDS <= 0 or SKILLRUNNER_WEBHOOK_RETRY_BASE_SECONDS <= 0:
    raise ImproperlyConfigured("SKILLRUNNER_WEBHOOK_TIMEOUT_SECONDS and _RETRY_BASE_SECONDS must be positive")
# The site's address as users reach it, for links in emails and webhook payloads (kernel.links);
# unset, `manage.py serve` uses the address it listens on.
SKILLRUNNER_PUBLIC_URL = env.str("SKILLRUNNER_PUBLIC_URL", default="").rstrip("/")
if SKILLRUNNER_PUBLIC_URL and not SKILLRUNNER_PUBLIC_URL.startswith(("http://", "https://")):
    raise ImproperlyConfigured(
        f"SKILLRUNNER_PUBLIC_URL must start with http:// or https://, got {SKILLRUNNER_PUBLIC_URL!r}"
    )
SKILLRUNNER_EMAIL_GRACE_SECONDS = env.float("SKILLRUNNER_EMAIL_GRACE_SECONDS", default=60.0)
# EMAIL_URL as django-environ reads it (smtp://user:pass@host:587, smtp+tls://…, consolemail://);
# unset parts keep Django's defaults.
globals().update({k: v for k, v in env.email_url("EMAIL_URL", default="consolemail://").items() if v is not None})
DEFAULT_FROM_EMAIL = env.str("DEFAULT_FROM_EMAIL", default="Skill Runner <skillrunner@localhost>")
# Question emails are an outbox like webhook deliveries: each SMTP phase has this timeout (a sender
# holds an email 3 timeouts + 5 s before another may send it), failures retry on the webhooks'
# schedule in units of the base.
SKILLRUNNER_EMAIL_TIMEOUT_SECONDS = env.float("SKILLRUNNER_EMAIL_TIMEOUT_SECONDS", default=10.0)
SKILLRUNNER_EMAIL_RETRY_BASE_SECONDS = env.float("SKILLRUNNER_EMAIL_RETRY_BASE_SECONDS", default=30.0)
if SKILLRUNNER_EMAIL_TIMEOUT_SECONDS <= 0 or SKILLRUNNER_EMAIL_RETRY_BASE_SECONDS <= 0:
    raise ImproperlyConfigured("SKILLRUNNER_EMAIL_TIMEOUT_SECONDS and _RETRY_BASE_SECONDS must be positive")
EMAIL_TIMEOUT = SKILLRUNNER_EMAIL_TIMEOUT_SECONDS

# Who may scrape GET /metrics without a staff token (R-OP11): addresses and networks
# ("10.0.0.5,10.1.0.0/16,::1"), matched against the peer the web server sees.
SKILLRUNNER_METRICS_ALLOW = _networks("SKILLRUNNER_METRICS_ALLOW")

# Skill folders dropped here are installed by `load_skills` (run by `make run` and worker start).
SKILLRUNNER_SKILLS_DIR = Path(env.str("SKILLRUNNER_SKILLS_DIR", default=str(DATA_DIR / "skills"))).resolve()
