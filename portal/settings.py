"""gpupool settings, read from the environment (12-factor).

Every knob has an embedded default so that the demo runs with no external service:
SQLite in ``data/``, an in-memory Celery transport with an in-process worker, and the
in-memory channel layer. Setting ``DATABASE_URL`` and ``REDIS_URL`` switches to the
production topology (PostgreSQL + Redis) with the same code.

``GPUPOOL_ENV=production`` turns on the hardened settings that pass
``manage.py check --deploy --fail-level WARNING``.
"""

from __future__ import annotations

import os
from pathlib import Path

import dj_database_url
from kombu import Queue

BASE_DIR = Path(__file__).resolve().parent.parent
DATA_DIR = Path(os.environ.get("GPUPOOL_DATA_DIR", BASE_DIR / "data"))


def env_bool(name: str, default: bool) -> bool:
    """Parse a boolean environment variable (1/true/yes/on)."""
    raw = os.environ.get(name)
    if raw is None:
        return default
    return raw.strip().lower() in {"1", "true", "yes", "on"}


def env_list(name: str, default: str) -> list[str]:
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


GPUPOOL_ENV = os.environ.get("GPUPOOL_ENV", "development")
PRODUCTION = GPUPOOL_ENV == "production"

DEBUG = env_bool("DEBUG", not PRODUCTION)
SECRET_KEY = os.environ.get("SECRET_KEY", "")
if not SECRET_KEY:
    if PRODUCTION:
        raise RuntimeError("SECRET_KEY must be set when GPUPOOL_ENV=production")
    SECRET_KEY = "dev-only-insecure-key-" + "x" * 40

ALLOWED_HOSTS = env_list(
    "ALLOWED_HOSTS", "" if PRODUCTION else "localhost,127.0.0.1,[::1],testserver")
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", "")

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",  # Swagger UI and ReDoc served from static files, not a CDN
    "django_htmx",
    "channels",
    "axes",
    "portal.core",
    "portal.tenants",
    "portal.inventory",
    "portal.fleet",
    "portal.leasing",
    "portal.web",
    "portal.billing",
    "portal.console",
    "portal.webhooks",
    "portal.sso",
    "portal.monitoring",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "portal.core.csp.ContentSecurityPolicyMiddleware",
    "portal.core.staticfiles.DualModeWhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.locale.LocaleMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "portal.core.middleware.RequestContextMiddleware",
    "axes.middleware.AxesMiddleware",
]

# The agent API (bearer credentials, JSON) runs in a lean ASGI handler of its own
# (portal/asgi.py, ADR 0150): no sessions, auth, CSRF, locale, messages, htmx or static
# files. SecurityMiddleware (HTTPS redirect, HSTS, nosniff), CommonMiddleware (ALLOWED_HOSTS
# via get_host, DISALLOWED_USER_AGENTS, Content-Length), fixed CSP/X-Frame-Options headers
# and the request context (caller address and agent, for audit) stay, all run in the
# event loop (no thread hop per hook: portal.core.lean_asgi.InlineMiddleware).
AGENT_API_PREFIX = "/api/agent/v1/"
AGENT_MIDDLEWARE = [
    "portal.core.lean_asgi.InlineSecurityMiddleware",
    "portal.core.lean_asgi.ApiHeadersMiddleware",
    "portal.core.lean_asgi.InlineCommonMiddleware",
    "portal.core.middleware.RequestContextMiddleware",
]

ROOT_URLCONF = "portal.urls"
WSGI_APPLICATION = "portal.wsgi.application"
ASGI_APPLICATION = "portal.asgi.application"

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
                "django.template.context_processors.i18n",
            ],
        },
    },
]

# --- Database -----------------------------------------------------------------------
DATA_DIR.mkdir(parents=True, exist_ok=True)
DATABASE_URL = os.environ.get("DATABASE_URL", f"sqlite:///{DATA_DIR / 'gpupool.sqlite3'}")
# Under ASGI every sync request may run on a fresh thread: persistent connections would
# leak one per thread, so connections are closed after each request unless told otherwise.
DATABASES = {"default": dj_database_url.parse(
    DATABASE_URL, conn_max_age=int(os.environ.get("DB_CONN_MAX_AGE", "0")))}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    DATABASES["default"]["CONN_MAX_AGE"] = 0
    DATABASES["default"]["OPTIONS"] = {
        # IMMEDIATE transactions take the write lock up front: no lock-upgrade deadlocks
        # between the web process and the in-process worker of the demo.
        "transaction_mode": "IMMEDIATE",
        "timeout": 20,
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
elif env_bool("DB_POOL", PRODUCTION):
    # PostgreSQL with a connection pool per process (psycopg_pool, Django ≥ 5.1): requests
    # and Celery tasks borrow an open connection instead of paying a backend start-up each
    # time; the pool needs CONN_MAX_AGE = 0. On by default in production; DB_POOL=0 turns it
    # off (behind PgBouncer in transaction mode, say).
    DATABASES["default"]["CONN_MAX_AGE"] = 0
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
        "min_size": int(os.environ.get("DB_POOL_MIN", "1")),
        "max_size": int(os.environ.get("DB_POOL_MAX", "10")),
        "timeout": float(os.environ.get("DB_POOL_TIMEOUT", "10")),
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Redis: broker, channel layer, cache (never the source of truth) ------------------
REDIS_URL = os.environ.get("REDIS_URL", "")
if REDIS_URL:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache",
                          "LOCATION": REDIS_URL}}
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels_redis.core.RedisChannelLayer",
                                  "CONFIG": {"hosts": [REDIS_URL]}}}
    CELERY_BROKER_URL = REDIS_URL
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    CHANNEL_LAYERS = {"default": {
        "BACKEND": "portal.core.channel_layer.ThreadSafeInMemoryChannelLayer"}}
    CELERY_BROKER_URL = "memory://"

# Celery: at-least-once delivery; every task is idempotent (see docs/adr/0001).
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_TIME_LIMIT = 300
CELERY_TASK_SOFT_TIME_LIMIT = 240
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 3600}
if not REDIS_URL:
    CELERY_BROKER_TRANSPORT_OPTIONS = {"polling_interval": 0.05}
# Two queues. The beat's control sweeps (the reconciler, the health sweep that fences a
# silent node) go to "control", so they never wait behind a backlog of lease steps in the
# FIFO "celery" queue; a worker started without -Q consumes both (kombu alternates between
# them). At 1,000 nodes a backlog made silence detection wait for minutes (issue 27).
CELERY_TASK_DEFAULT_QUEUE = "celery"
CELERY_TASK_QUEUES = (Queue("celery"), Queue("control"))
CONTROL_TASKS = ("portal.leasing.tasks.reconcile", "portal.fleet.tasks.fleet_health_sweep")
CELERY_TASK_ROUTES = {name: {"queue": "control"} for name in CONTROL_TASKS}
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True
CELERY_TIMEZONE = "UTC"
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
RECONCILE_EVERY_S = float(os.environ.get("GPUPOOL_RECONCILE_EVERY_S", "5"))
# How long one reconciler beat may spend re-driving converging leases (the rest: next beat)
GPUPOOL_RECONCILE_BUDGET_S = float(os.environ.get("GPUPOOL_RECONCILE_BUDGET_S", "30"))
# The reconciler's repair sweep covers every granting node once per this (lifecycle/repair)
GPUPOOL_REPUSH_SWEEP_S = float(os.environ.get("GPUPOOL_REPUSH_SWEEP_S", "600"))
GPUPOOL_REPUSH_MIN_PER_BEAT = int(os.environ.get("GPUPOOL_REPUSH_MIN_PER_BEAT", "20"))
# Agents' intervals scale with the fleet (portal/fleet/intervals.py, ADR 0160)
GPUPOOL_AGENT_REPORTS_PER_S = float(os.environ.get("GPUPOOL_AGENT_REPORTS_PER_S", "50"))
GPUPOOL_AGENT_LONG_POLLS_PER_S = float(os.environ.get("GPUPOOL_AGENT_LONG_POLLS_PER_S", "100"))
GPUPOOL_AGENT_UNREACHABLE_AFTER_S = int(os.environ.get("GPUPOOL_AGENT_UNREACHABLE_AFTER_S",
                                                       "30"))
# /metrics (portal/monitoring, ADR 0230): a bearer token and/or allow-listed addresses
# (comma-separated, CIDR); neither set: nobody may read it
GPUPOOL_METRICS_TOKEN = os.environ.get("GPUPOOL_METRICS_TOKEN", "")
GPUPOOL_METRICS_ALLOW = os.environ.get("GPUPOOL_METRICS_ALLOW", "")
# The site's health-policy overrides (a YAML path; empty: the shipped table). ADR 0185
GPUPOOL_HEALTH_POLICY = os.environ.get("GPUPOOL_HEALTH_POLICY", "")


def _beat(task: str, every_s: float) -> dict[str, object]:
    """A beat entry whose message expires after one period: a beat sent while the workers
    are busy is dropped, not queued up in front of the lease steps (a stale sweep adds
    nothing the next one will not do)."""
    return {"task": task, "schedule": every_s, "options": {"expires": every_s}}


CELERY_BEAT_SCHEDULE = {
    "reconcile-leases": _beat("portal.leasing.tasks.reconcile", RECONCILE_EVERY_S),
    "meter-usage": _beat("billing.meter_usage",
                         float(os.environ.get("GPUPOOL_METER_EVERY_S", "300"))),
    "finalize-invoices": _beat("billing.finalize_invoices", 3600.0),
    "fleet-health-sweep": _beat("portal.fleet.tasks.fleet_health_sweep",
                                float(os.environ.get("GPUPOOL_HEALTH_SWEEP_S", "5"))),
    "fleet-telemetry-purge": _beat("portal.fleet.tasks.fleet_telemetry_purge", 3600.0),
    "webhooks-sweep": _beat("portal.webhooks.tasks.sweep", 60.0),
}

# --- Outbound webhooks (portal/webhooks, ADR 0200) ----------------------------------------
# Receivers on loopback/private/link-local addresses: allowed outside production only.
GPUPOOL_WEBHOOKS_ALLOW_PRIVATE = env_bool("GPUPOOL_WEBHOOKS_ALLOW_PRIVATE", not PRODUCTION)
GPUPOOL_WEBHOOKS_TIMEOUT_S = float(os.environ.get("GPUPOOL_WEBHOOKS_TIMEOUT_S", "10"))
# Delay before each try (Svix: now, 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h ≈ 27.5 h)
GPUPOOL_WEBHOOKS_SCHEDULE_S = [float(x) for x in env_list(
    "GPUPOOL_WEBHOOKS_SCHEDULE_S", "0,5,300,1800,7200,18000,36000,36000")]
GPUPOOL_WEBHOOKS_OVERLAP_S = float(os.environ.get("GPUPOOL_WEBHOOKS_OVERLAP_S", "86400"))
GPUPOOL_WEBHOOKS_SWEEP_GRACE_S = float(os.environ.get("GPUPOOL_WEBHOOKS_SWEEP_GRACE_S", "30"))

# --- gpupool ------------------------------------------------------------------------------
# Simulated agents apply desired state at once (demo, tests); production runs real agents.
GPUPOOL_SIMULATED_AGENTS = env_bool("GPUPOOL_SIMULATED_AGENTS", not PRODUCTION)
# Web processes read the scheduler caches as they start (portal/leasing/warmup.py): the
# first quote or order of a process does not pay the cold build (about 1 s at 10,000 nodes).
GPUPOOL_WARM_WEB = env_bool("GPUPOOL_WARM_WEB", PRODUCTION)
# Web and Celery processes freeze their start-up heap out of the garbage collector's passes
# before warming their caches (portal/core/gcpolicy.py, ADR 0172).
GPUPOOL_GC_FREEZE = env_bool("GPUPOOL_GC_FREEZE", True)
GPUPOOL_PROVISION_TIMEOUT_S = int(os.environ.get("GPUPOOL_PROVISION_TIMEOUT_S", "120"))
GPUPOOL_RELEASE_TIMEOUT_S = int(os.environ.get("GPUPOOL_RELEASE_TIMEOUT_S", "300"))
# A running spot lease is told this long before it is preempted (0: preempted at once).
GPUPOOL_PREEMPT_GRACE_S = int(os.environ.get("GPUPOOL_PREEMPT_GRACE_S", "120"))
GPUPOOL_INVITATION_DAYS = int(os.environ.get("GPUPOOL_INVITATION_DAYS", "7"))
# Desired-state long-polls: "listen" (PostgreSQL LISTEN/NOTIFY, portal/fleet/wakeup.py) or
# "poll" (e.g. behind PgBouncer in transaction mode, where LISTEN does not work).
GPUPOOL_DESIRED_WAKEUP = os.environ.get("GPUPOOL_DESIRED_WAKEUP", "listen")
# How far ahead an order may start (portal/leasing/limits.py; issue 13).
ORDER_BOOKING_HORIZON_DAYS = int(os.environ.get("GPUPOOL_BOOKING_HORIZON_DAYS", "90"))
# Exchange rates from the base currency (USD) for tenants without their own price rows
# ("CNY=7.2,EUR=0.92"; default: portal/billing/pricing.py DEFAULT_FX_RATES; ADR 0108).
if os.environ.get("GPUPOOL_FX_RATES"):
    BILLING_FX_RATES = dict(i.split("=", 1) for i in env_list("GPUPOOL_FX_RATES", ""))
if GPUPOOL_SIMULATED_AGENTS:
    CELERY_BEAT_SCHEDULE["simulated-telemetry"] = _beat(
        "portal.leasing.tasks.simulate_telemetry",
        float(os.environ.get("GPUPOOL_SIMULATED_TELEMETRY_S", "3")))

# --- Auth ---------------------------------------------------------------------------
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
    "portal.sso.backend.ProviderBackend",  # sessions of SSO logins (ADR 0221)
]
# SSO (OpenID Connect): a JSON list, inline or a file path: [{"name", "label", "issuer",
# "client_id", "client_secret", "scopes"}]; endpoints come from the discovery document.
GPUPOOL_OIDC_PROVIDERS = os.environ.get("GPUPOOL_OIDC_PROVIDERS", "")
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/accounts/login/"
AXES_FAILURE_LIMIT = int(os.environ.get("AXES_FAILURE_LIMIT", "5"))
AXES_COOLOFF_TIME = 0.25  # hours
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_ENABLED = env_bool("AXES_ENABLED", True)
AXES_LOCKOUT_TEMPLATE = "registration/locked_out.html"
SESSION_COOKIE_AGE = 12 * 3600
SESSION_EXPIRE_AT_BROWSER_CLOSE = False

# --- I18N / time --------------------------------------------------------------------
LANGUAGE_CODE = "en"
LANGUAGES = [("en", "English"), ("zh-hans", "简体中文")]
LOCALE_PATHS = [BASE_DIR / "locale"]
TIME_ZONE = os.environ.get("TIME_ZONE", "UTC")
USE_I18N = True
USE_TZ = True  # storage is always UTC
FORMAT_MODULE_PATH = ["portal.web.formats"]  # zh-hans numbers with a thousands separator

# --- Static -------------------------------------------------------------------------
STATIC_URL = "/static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
STATICFILES_DIRS = [BASE_DIR / "portal" / "static"]
WHITENOISE_USE_FINDERS = not PRODUCTION  # the demo serves static files without collectstatic
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": (
            "whitenoise.storage.CompressedManifestStaticFilesStorage"
            if PRODUCTION
            else "django.contrib.staticfiles.storage.StaticFilesStorage"
        )
    },
}

# --- REST API -----------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "portal.tenants.authentication.ApiKeyAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_PAGINATION_CLASS": "portal.core.api.pagination.Pagination",
    "PAGE_SIZE": 50,
    "DEFAULT_FILTER_BACKENDS": [],
    "EXCEPTION_HANDLER": "portal.core.api.errors.exception_handler",
    "DEFAULT_VERSIONING_CLASS": None,
    "TEST_REQUEST_DEFAULT_FORMAT": "json",
    # Rate limits (docs/security.md "Rate limits and CSP"): per user, else per address.
    "DEFAULT_THROTTLE_CLASSES": ["portal.core.throttles.PortalThrottle"],
    "DEFAULT_THROTTLE_RATES": {
        "login": os.environ.get("GPUPOOL_RATE_LOGIN", "20/min"),
        "orders": os.environ.get("GPUPOOL_RATE_ORDERS", "30/min"),
        "quotes": os.environ.get("GPUPOOL_RATE_QUOTES", "120/min"),
        "api_keys": os.environ.get("GPUPOOL_RATE_API_KEYS", "10/min"),
        "invitations": os.environ.get("GPUPOOL_RATE_INVITATIONS", "30/hour"),
        "invitation_accept": os.environ.get("GPUPOOL_RATE_INVITATION_ACCEPT", "20/min"),
    },
}
# Writes limited by URL name (the views need not know); the pages share the API's counters.
GPUPOOL_THROTTLE_ROUTES = {"order-create": "orders", "order-quote": "quotes",
                           "apikey-list": "api_keys", "invitation-list": "invitations"}
# Content-Security-Policy (portal/core/csp.py): "'nonce'" = this request's nonce. Inline
# styles stay allowed (style attributes in templates; htmx's indicator style).
GPUPOOL_CSP = {
    "default-src": ["'self'"], "script-src": ["'self'", "'nonce'"],
    "style-src": ["'self'", "'unsafe-inline'"], "img-src": ["'self'", "data:"],
    "font-src": ["'self'"], "connect-src": ["'self'"], "object-src": ["'none'"],
    "base-uri": ["'self'"], "form-action": ["'self'"], "frame-ancestors": ["'none'"],
}
# The API docs come from drf-spectacular-sidecar (installed files, no CDN); ReDoc runs its
# search in a blob: worker.
GPUPOOL_CSP_EXTRA = {"/api/redoc/": {"worker-src": ["blob:"]}}
SPECTACULAR_SETTINGS = {
    "TITLE": "gpupool API",
    "DESCRIPTION": "Lease GPUs from a shared InfiniBand-connected pool.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "COMPONENT_SPLIT_REQUEST": True,
    "SCHEMA_PATH_PREFIX": r"/api/v1",
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "ENUM_NAME_OVERRIDES": {
        "TenantRoleEnum": "portal.tenants.models.Role",
        "SwitchRoleEnum": "portal.inventory.models.Switch.Role",
        "LeaseStateEnum": "portal.leasing.models.LeaseState",
        "NodeStateEnum": "portal.inventory.models.Node.State",
        "ServiceStateEnum": "portal.inventory.models.Service",
    },
    "APPEND_COMPONENTS": {
        "securitySchemes": {
            "ApiKey": {"type": "http", "scheme": "bearer", "description": "gpupool API key"}
        }
    },
}

# --- Email ----------------------------------------------------------------------------
EMAIL_BACKEND = os.environ.get("EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend")
DEFAULT_FROM_EMAIL = os.environ.get("DEFAULT_FROM_EMAIL", "gpupool <noreply@localhost>")

# --- Logging --------------------------------------------------------------------------
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
    "loggers": {"django.db.backends": {"level": "WARNING"}, "axes": {"level": "WARNING"}},
}

# --- Production hardening (check --deploy clean) ---------------------------------------
if PRODUCTION:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", True)
    SECURE_HSTS_SECONDS = int(os.environ.get("SECURE_HSTS_SECONDS", "31536000"))
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = True
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SESSION_COOKIE_HTTPONLY = True
    X_FRAME_OPTIONS = "DENY"
    SECURE_CONTENT_TYPE_NOSNIFF = True
    SECURE_REFERRER_POLICY = "same-origin"
