"""Settings for Airlock, read from the environment (see README.md for the variables)."""

import os
import sys
from datetime import timedelta
from pathlib import Path

import dj_database_url
from django.core.management.utils import get_random_secret_key
from django.utils.csp import CSP

from console.env import (
    EnvError,
    env_bool,
    env_duration,
    env_file,
    env_float,
    env_int,
    env_lanes,
    env_list,
    env_networks,
    env_str,
    env_url,
    kept_secret,
)

# What the app writes (the SQLite database, mail, uploads, the receipt key and heads, the folders they go in) is
# its user's alone: the database holds session keys and password hashes.
os.umask(0o077)
BASE_DIR = Path(__file__).resolve().parent.parent
DATA_DIR = Path(env_str("AIRLOCK_DATA_DIR", str(BASE_DIR / "data")))

DEBUG = env_bool("DEBUG", True)
SECRET_KEY = env_str("SECRET_KEY", "")
if not SECRET_KEY:
    if not DEBUG:
        raise EnvError("SECRET_KEY must be set when DEBUG is off")
    # Kept in the data folder like the demo password, so a restart does not sign everyone out.
    SECRET_KEY = "dev-only-" + kept_secret(DATA_DIR / "secret-key", get_random_secret_key)
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]"] if DEBUG else [])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "django_htmx",
    "ninja",
    "django_tasks_db",
    "console",
    "agents",
    "approvals",
    "slackapp",
    "decisionlog",
    "identity",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # Near the top: it compresses what the middleware below it wrote (console/compression.py).
    "console.compression.PageGZipMiddleware",
    "django.middleware.csp.ContentSecurityPolicyMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "console.tenancy.TenantMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    # Last: its 403/404 pages show the signed-in navigation (console/errors.py).
    "console.errors.ErrorPagesMiddleware",
]
CSRF_FAILURE_VIEW = "console.errors.csrf_failure"

ROOT_URLCONF = "console.urls"
ASGI_APPLICATION = "console.asgi.application"
WSGI_APPLICATION = None

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
                "django.template.context_processors.csp",
                "console.tenancy.tenant_context",
                "approvals.context_processors.pending_requests",
                "approvals.context_processors.held_answers",
            ],
        },
    },
]

DATABASES = {
    "default": dj_database_url.parse(
        env_url(
            "DATABASE_URL",
            f"sqlite:///{DATA_DIR / 'airlock.sqlite3'}",
            schemes=("sqlite", "postgres", "postgresql", "pgsql"),
        ),
        # Keep connections between requests (opening one, with SQLite's pragmas, costs more than a turn's queries).
        conn_max_age=env_int("DATABASE_CONN_MAX_AGE", 60),
        conn_health_checks=True,
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    # Under ASGI a request's thread does not outlive it, so a kept connection would be left behind per
    # request until PostgreSQL refuses more: connections come from a pool of this process instead.
    DATABASES["default"]["CONN_MAX_AGE"] = 0
    DATABASES["default"]["OPTIONS"] = {
        "pool": {"min_size": 1, "max_size": env_int("DATABASE_POOL_SIZE", 20, minimum=1), "timeout": 20},
        # Parameters bound on the server, and a statement a connection has run this many times prepared there:
        # PostgreSQL then parses and plans it once per connection, not at every run (a claimed run's lookup
        # plans for ~1 ms and executes in 0.3). 0 turns it off, for a pooler that cannot keep prepared
        # statements (PgBouncer in transaction mode before 1.21).
        "server_side_binding": True,
        "prepare_threshold": env_int("DATABASE_PREPARE_THRESHOLD", 5) or None,
    }
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # SQLite creates the file but not its folder; a fresh checkout has no data folder yet.
    if DATABASES["default"]["NAME"] != ":memory:":
        Path(DATABASES["default"]["NAME"]).parent.mkdir(parents=True, exist_ok=True)
    # WAL lets the inbox read while a run writes; the timeout rides out short write bursts.
    DATABASES["default"]["OPTIONS"] = {
        "transaction_mode": "IMMEDIATE",
        "timeout": 20,
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL = env_url("REDIS_URL", "", schemes=("redis", "rediss", "unix"))
# Messages a channel holds before the layer drops more: a session stream may fall a reply's worth of deltas
# behind its turn (agents/live.py); the default, 100, would drop them.
CHANNEL_CAPACITY = 5000
if REDIS_URL:
    # redis-py times reads out after 5 s, just when channels_redis's blocking receive would return empty:
    # idle consoles were dropped. Many consoles reconnecting at once need more than 100 connections.
    REDIS_HOST = {"address": REDIS_URL, "socket_timeout": 30, "max_connections": 2000}
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [REDIS_HOST], "capacity": CHANNEL_CAPACITY},
        }
    }
else:
    CHANNEL_LAYERS = {
        # Channels' in-memory layer, made safe to send to from the worker threads (console/layers.py).
        "default": {"BACKEND": "console.layers.InMemoryChannelLayer", "CONFIG": {"capacity": CHANNEL_CAPACITY}}
    }

# The session streams and console websockets one user may hold open in each process (console/slots.py): the
# next stream gets 429 `too_many_streams`, the next websocket closes with 4429.
SESSION_STREAMS_PER_USER = env_int("SESSION_STREAMS_PER_USER", 100, minimum=1)
WEBSOCKETS_PER_USER = env_int("WEBSOCKETS_PER_USER", 100, minimum=1)
# Long polls (`GET /api/requests/{id}?wait=N`) one console process holds at once, whoever asks; the next is 429
# `too_many_long_polls` with Retry-After (console/asgi.py; their reads share a few threads, however many wait).
LONG_POLLS_PER_PROCESS = env_int("LONG_POLLS_PER_PROCESS", 1000, minimum=1)

# Who may read `GET /metrics` (SPEC section 18) without a token (`manage.py create_metrics_token`): addresses and CIDR
# blocks, comma-separated, as the console sees the peer (behind a proxy: the proxy's); empty: nobody.
METRICS_ALLOW = env_networks("METRICS_ALLOW")

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
# Password checks go through the login throttle (console/login.py), the Django admin's included; sign-ins through
# an OpenID Connect connection through its backend (SPEC section 19, identity/backend.py).
AUTHENTICATION_BACKENDS = ["console.login.ThrottledModelBackend", "identity.backend.OidcBackend"]
# PASSWORD_LOGIN=0: only superusers sign in with a password; everyone else through an identity provider.
PASSWORD_LOGIN = env_bool("PASSWORD_LOGIN", True)
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "dashboard"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = DATA_DIR / "static"
# `manage.py serve` sweeps request deadlines every this many seconds (0: leave it to `sweep_deadlines`).
DEADLINE_SWEEP_SECONDS = env_int("DEADLINE_SWEEP_SECONDS", 5)
# An answer given in the console is held this many seconds before it is applied, so its Undo can take it
# back (approvals.actions.held; 0: applied at once).
ANSWER_UNDO_SECONDS = env_float("ANSWER_UNDO_SECONDS", 5.0)
# A rule an approval remembers "always" holds this long unless the answer says until when (`expiresAt`):
# "30d", "12h", "45m", "90s"; empty: never expires (approvals.remembered_rules.default_expiry).
RULE_DEFAULT_EXPIRY = env_duration("RULE_DEFAULT_EXPIRY", timedelta(days=30))

# A model provider that does not answer within this many seconds fails the turn (provider_timeout).
# Queued runs (SPEC section 7): Django's tasks framework on the database, one queue per lane.
TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend", "QUEUES": []}}
# Runs of one lane that may run at once, over all workers: "default=4,bulk=1"; other lanes get
# RUN_LANE_CONCURRENCY.
RUN_LANES = env_lanes("RUN_LANES", {})
RUN_LANE_CONCURRENCY = env_int("RUN_LANE_CONCURRENCY", 4, minimum=1)
# Attempts of one queued run when a transient failure (provider 429/5xx, a lost worker) ends a try.
RUN_MAX_ATTEMPTS = env_int("RUN_MAX_ATTEMPTS", 3, minimum=1)
RUN_RETRY_DELAY_SECONDS = env_int("RUN_RETRY_DELAY_SECONDS", 2)
# A running turn's lease: renewed every second by its process; once expired the run is reclaimed.
RUN_LEASE_SECONDS = env_int("RUN_LEASE_SECONDS", 30, minimum=2)
# Worker threads `manage.py serve` runs beside the console (0: queued runs wait for `run_worker`).
WORKER_THREADS = env_int("WORKER_THREADS", 4)
# On PostgreSQL a queued run wakes the idle workers of every process at once (agents/wakeups.py: a trigger's
# NOTIFY, one LISTEN connection per process); the poll is then only a safety net. Off (0) behind a pooler that
# cannot hold a LISTEN session (PgBouncer in transaction mode): workers then poll every 0.5 s.
WORKER_WAKEUPS = env_bool("WORKER_WAKEUPS", True) and DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql"
WORKER_POLL_SECONDS = env_float("WORKER_POLL_SECONDS", 5.0 if WORKER_WAKEUPS else 0.5)

PROVIDER_TIMEOUT_SECONDS = env_int("PROVIDER_TIMEOUT_SECONDS", 120, minimum=1)
# Tenants' policies compile and evaluate in worker processes of their own, each task under a budget
# (agents/policy_sandbox.py); a tenant's policy compiles (saves of new policy texts) are rate-limited.
POLICY_WORKERS = env_int("POLICY_WORKERS", 2, minimum=1)
# Policy workers one tenant's evaluations and compiles may hold at once; its further tasks wait in its own queue
# (counted against their budgets), so one tenant's costly policy slows only itself.
POLICY_WORKERS_PER_TENANT = env_int("POLICY_WORKERS_PER_TENANT", -(-POLICY_WORKERS // 2), minimum=1)
POLICY_COMPILE_BUDGET_MS = env_int("POLICY_COMPILE_BUDGET_MS", 3000, minimum=1)
POLICY_EVAL_BUDGET_MS = env_int("POLICY_EVAL_BUDGET_MS", 1000, minimum=1)
POLICY_COMPILES_PER_MINUTE = env_int("POLICY_COMPILES_PER_MINUTE", 10, minimum=1)

MEDIA_ROOT = DATA_DIR / "media"
ATTACHMENT_MAX_BYTES = env_int("ATTACHMENT_MAX_BYTES", 10 * 1024 * 1024, minimum=1)
DATA_UPLOAD_MAX_MEMORY_SIZE = env_int("DATA_UPLOAD_MAX_MEMORY_SIZE", 2_621_440 * 4, minimum=1)
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    # Hashed names and a far-future cache (console/staticfiles.py); `collectstatic` runs in `make setup`.
    "staticfiles": {"BACKEND": "console.staticfiles.HashedStaticFilesStorage"},
}
if "pytest" in sys.modules:
    # Unit tests render pages whatever an earlier collectstatic left in STATIC_ROOT: plain names. (The browser
    # tests' server is a process of its own, without pytest: it links the hashed names, as production does.)
    STORAGES["staticfiles"] = {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"}
    # Every test Client builds its own middleware chain, and whitenoise scanned STATIC_ROOT (760 files) in each
    # one: 0.26 s a client, over a third of the unit tests' time. Found per request instead.
    WHITENOISE_AUTOREFRESH = True

# With DEBUG on, mail goes to files in the data folder; in production it goes out over SMTP
# (a file backend there would drop every email, and `check --deploy` refuses it). MAIL_BACKEND overrides.
MAIL_BACKEND = env_str(
    "MAIL_BACKEND",
    "django.core.mail.backends.filebased.EmailBackend" if DEBUG else "django.core.mail.backends.smtp.EmailBackend",
)
if MAIL_BACKEND.endswith(".filebased.EmailBackend"):
    MAIL_OPTIONS: dict[str, object] = {"file_path": str(DATA_DIR / "mail")}
elif MAIL_BACKEND.endswith(".smtp.EmailBackend"):
    MAIL_OPTIONS = {
        "host": env_str("MAIL_HOST", "localhost"),
        "port": env_int("MAIL_PORT", 25, minimum=1),
        "username": env_str("MAIL_USER", ""),
        "password": env_str("MAIL_PASSWORD", ""),
        "use_tls": env_bool("MAIL_USE_TLS", False),
    }
else:
    MAIL_OPTIONS = {}
MAILERS = {"default": {"BACKEND": MAIL_BACKEND, "OPTIONS": MAIL_OPTIONS}}
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "airlock@localhost")
# The console's address as its users reach it: the links in e-mails (digests) start with it.
CONSOLE_URL = env_url("CONSOLE_URL", "http://127.0.0.1:8000", schemes=("http", "https")).rstrip("/")
# How often `manage.py serve` sends the e-mail digests that are due (0: never; then `manage.py send_digests
# --every N`). Each member still gets at most one every N minutes, the N they chose.
DIGEST_SWEEP_SECONDS = env_int("DIGEST_SWEEP_SECONDS", 60)
# How often `manage.py serve` sends what Slack must show (SPEC section 17: the outbox of slackapp; sooner when an
# answer from Slack wakes it; 0: never, then `manage.py slack_outbox --every N`).
SLACK_OUTBOX_SECONDS = env_float("SLACK_OUTBOX_SECONDS", 2.0)
# How often `manage.py serve` ships the decision log to its sinks (SPEC section 18, decisionlog.shipping; 0: never,
# then `manage.py ship_decisions --every N`).
DECISION_LOG_SECONDS = env_float("DECISION_LOG_SECONDS", 1.0)
# The installation's Ed25519 key that signs each tenant's chain of receipts (SPEC section 13), made on first use,
# and how often a serving process signs the chain heads that moved (at least every minute). Every signed head is
# also appended to RECEIPT_HEADS_FILE, outside the database (approvals.signing.sign_heads). Both sit beside the
# data folder, not in it, so a copy of the database or of the data folder is not the key; an installation that
# kept them in the data folder has them moved on its next start.
RECEIPT_KEYS_DIR = DATA_DIR.parent / f"{DATA_DIR.name}-keys"
RECEIPT_SIGNING_KEY_FILE = str(
    env_file(
        "RECEIPT_SIGNING_KEY_FILE",
        RECEIPT_KEYS_DIR / "receipt-signing.key",
        moved_from=DATA_DIR / "receipt-signing.key",
    )
)
RECEIPT_SIGN_SECONDS = env_int("RECEIPT_SIGN_SECONDS", 30, minimum=1)
RECEIPT_HEADS_FILE = str(
    env_file(
        "RECEIPT_HEADS_FILE", RECEIPT_KEYS_DIR / "receipt-heads.jsonl", moved_from=DATA_DIR / "receipt-heads.jsonl"
    )
)

SESSION_COOKIE_HTTPONLY = True
# Every script and style comes from the console's own static files (no CDN: it works offline); nothing inline
# runs, eval included (htmx's is off, base.html). A template that needs an inline block gives it the nonce
# ({% csp_nonce_attr %}, as the Django admin does); a response that uses none carries none in its header.
SECURE_CSP = {
    "default-src": [CSP.SELF],
    "script-src": [CSP.SELF, CSP.NONCE],
    "style-src": [CSP.SELF, CSP.NONCE],
    "img-src": [CSP.SELF],
    "connect-src": [CSP.SELF],  # the console websocket included: 'self' covers ws(s):// of the same host
    "object-src": [CSP.NONE],
    "base-uri": [CSP.NONE],
    "form-action": [CSP.SELF],
    "frame-ancestors": [CSP.NONE],
}
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
if not DEBUG:
    SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", True)
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 31536000)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", True)
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    # Django's own loggers are set to INFO by its defaults: without this, LOG_LEVEL=WARNING still printed (and
    # paid for) two lines of django.tasks for every queued run.
    "loggers": {
        "django": {"level": env_str("LOG_LEVEL", "INFO")},
        # The a2a-sdk logs a client's malformed request with a traceback, as if the server had failed; the client is
        # answered with its JSON-RPC error all the same.
        "a2a.compat.v0_3.jsonrpc_adapter": {"level": "ERROR"},
        "a2a.server.routes.jsonrpc_dispatcher": {"level": "ERROR"},
    },
}
