"""Settings for the PT2 triage dashboard.

One file, driven by environment variables. With no variables set it runs the
"embedded default": SQLite, a filesystem Celery broker and demo data, no
external service needed. The real setup sets DATABASE_URL (PostgreSQL) and
CELERY_BROKER_URL (Redis).
"""

import base64
import os
from datetime import timedelta
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from rubric_app.bisection.builds import parse as parse_torch_builds
from rubric_app.vocabulary import DEFAULT_AUTOMATION_ACCOUNTS, QUEUE_LABELS, parse_automation_accounts

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("TRIAGE_VAR_DIR", BASE_DIR / "var"))


def env_bool(name: str, default: bool) -> bool:
    """Return the boolean value of an env var; an unknown spelling is an error, not False."""
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    value = raw.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ImproperlyConfigured(f"{name}={raw!r} is not a boolean (use true/false).")


def env_list(name: str, default: str = "") -> list[str]:
    """Return a comma-separated env var as a list with blanks dropped."""
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


def env_float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return float(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not a number.") from None


def parse_database_url(url: str) -> dict:
    """Return Django's DATABASES entry for url, or raise a clear ImproperlyConfigured.

    dj-database-url reports an unknown scheme with a bare KeyError/ValueError that
    names neither the variable nor the accepted forms; say both.
    """
    try:
        # Persistent connections only where the server reuses its threads (gunicorn's sync workers, Celery):
        # the development server starts a thread per request, and each kept its connection until PostgreSQL
        # refused more ("too many clients"). The deploy units set DB_CONN_MAX_AGE=60; the default keeps none.
        config = dj_database_url.parse(url, conn_max_age=int(env_float("DB_CONN_MAX_AGE", 0)), conn_health_checks=True)
    except Exception as exc:  # noqa: BLE001 - any parse failure gets the same clear message
        raise ImproperlyConfigured(
            f"DATABASE_URL could not be parsed ({exc.__class__.__name__}: {exc}). "
            "Expected e.g. postgres://user@127.0.0.1:5432/dbname or sqlite:////abs/path.db"
        ) from None
    if not config.get("ENGINE") or not config.get("NAME"):
        raise ImproperlyConfigured(
            "DATABASE_URL names no engine or database. "
            "Expected e.g. postgres://user@127.0.0.1:5432/dbname or sqlite:////abs/path.db"
        )
    return config


# DEBUG, ALLOWED_HOSTS and HTTPS are each set by their own variable: none of them changes
# because another one is set (SECRET_KEY alone used to turn DEBUG off, then every local
# request got 400 for its host and a 301 to https).
DEBUG = env_bool("DEBUG", True)
SECRET_KEY = os.environ.get("SECRET_KEY", "")
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured("SECRET_KEY must be set when DEBUG is off.")
    SECRET_KEY = "insecure-development-key-only-used-with-DEBUG-on"

LOCAL_HOSTS = "127.0.0.1,localhost,[::1],testserver"
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", LOCAL_HOSTS)
if not ALLOWED_HOSTS:
    raise ImproperlyConfigured(f"ALLOWED_HOSTS is empty: every request would get 400. Set it, e.g. {LOCAL_HOSTS}.")
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS")

# HTTPS=true: redirect to https, secure cookies, HSTS. Off by default (a local run is plain
# http); with DEBUG off it must be said either way, so production never guesses.
if not DEBUG and os.environ.get("HTTPS", "") == "":
    raise ImproperlyConfigured(
        "DEBUG is off: set HTTPS=true (redirect to https, secure cookies, HSTS) or HTTPS=false "
        "(plain http, e.g. on 127.0.0.1 or behind a proxy that sets USE_X_FORWARDED_PROTO)."
    )
HTTPS = env_bool("HTTPS", False)

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_htmx",
    "template_partials",
    "allauth",
    "allauth.account",
    "allauth.socialaccount",
    "allauth.socialaccount.providers.github",
    "rubric_app",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "allauth.account.middleware.AccountMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "rubric_app.web.middleware.NotFoundPageMiddleware",
    # A GitHub user's role is re-read from GitHub at least every 10 minutes while signed in (github/identity.py).
    "rubric_app.web.middleware.CurrentRoleMiddleware",
]

if not DEBUG:
    # Static files from the web process itself, hashed and cached for a year, no separate file server
    # (with DEBUG on, runserver serves them from the app folders as they are).
    MIDDLEWARE.insert(1, "whitenoise.middleware.WhiteNoiseMiddleware")

ROOT_URLCONF = "triage_site.urls"

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
                "rubric_app.web.context_processors.github_mode",
            ],
            # The app's tags live with the rest of the web layer (rubric_app/web/), not in the
            # templatetags folder Django looks for by default.
            "libraries": {
                "triage": "rubric_app.web.templatetags.triage",
                "health": "rubric_app.web.templatetags.health",
            },
        },
    },
]

WSGI_APPLICATION = "triage_site.wsgi.application"

DATABASES = {"default": parse_database_url(os.environ.get("DATABASE_URL") or f"sqlite:///{VAR_DIR / 'db.sqlite3'}")}
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):
    # The web process and the worker write to the same file; wait for the lock
    # instead of failing with "database is locked".
    DATABASES["default"]["CONN_MAX_AGE"] = 0
    DATABASES["default"].setdefault("OPTIONS", {})["timeout"] = 20
elif DATABASES["default"]["ENGINE"].endswith("postgresql"):
    # The dashboard's queries are short: with JIT on, PostgreSQL spent 30 ms compiling the meeting
    # agenda's query (its estimate passed jit_above_cost on a 50,000-issue mirror) to run it in 2.
    # An `options` given in DATABASE_URL's query string wins.
    DATABASES["default"].setdefault("OPTIONS", {}).setdefault("options", "-c jit=off")
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# In memory, per process: the queue's rendered table (rubric_app/web/queue_cache.py). Each entry's key
# holds a token the database changes with every write the table shows, so processes keeping their
# own copies never serve an old table; MAX_ENTRIES bounds the memory (an entry is ~100 KB).
CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.locmem.LocMemCache",
        "LOCATION": "triage",
        "OPTIONS": {"MAX_ENTRIES": 200},
    },
}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
# Local accounts (the demo's, an operator's break-glass superuser) sign in with a password; an account linked to
# GitHub never does (rubric_app/github/auth_backends.py), and a GitHub sign-in's session names the second backend.
AUTHENTICATION_BACKENDS = [
    "rubric_app.github.auth_backends.LocalAccountBackend",
    "rubric_app.github.auth_backends.GitHubSignInBackend",
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "rubric_app:queue"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = Path(os.environ.get("STATIC_ROOT") or BASE_DIR / "staticfiles")
# With DEBUG off, `collectstatic` writes hashed names (htmx.min.<hash>.js) that whitenoise serves with a
# far-future Cache-Control; with DEBUG on, files are served as they are, no collectstatic needed.
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"
        if DEBUG
        else "whitenoise.storage.CompressedManifestStaticFilesStorage"
    },
}

# Production hardening: on with HTTPS, each overridable for a deployment that terminates TLS elsewhere.
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", HTTPS)
SESSION_COOKIE_SECURE = env_bool("SESSION_COOKIE_SECURE", HTTPS)
CSRF_COOKIE_SECURE = env_bool("CSRF_COOKIE_SECURE", HTTPS)
SECURE_HSTS_SECONDS = int(env_float("SECURE_HSTS_SECONDS", 31536000 if HTTPS else 0))
SECURE_HSTS_INCLUDE_SUBDOMAINS = HTTPS
SECURE_HSTS_PRELOAD = HTTPS
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
if env_bool("USE_X_FORWARDED_PROTO", False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
X_FRAME_OPTIONS = "DENY"

# GitHub. The token stays on the server: never put it in a template context.
GITHUB_TOKEN = os.environ.get("GITHUB_TOKEN", "")
GITHUB_REPO = os.environ.get("GITHUB_REPO", "pytorch/pytorch")
GITHUB_API_URL = os.environ.get("GITHUB_API_URL", "https://api.github.com").rstrip("/")
# Several secrets so that a webhook secret can be rotated without dropping deliveries.
GITHUB_WEBHOOK_SECRETS = env_list("GITHUB_WEBHOOK_SECRETS", os.environ.get("GITHUB_WEBHOOK_SECRET", ""))
# Sign in with GitHub (django-allauth's GitHub provider), on when both OAuth settings are set.
# GITHUB_URL is GitHub's web root (/login/oauth/...); the demo and the tests point it at 127.0.0.1.
GITHUB_URL = os.environ.get("GITHUB_URL", "https://github.com").rstrip("/")
GITHUB_OAUTH_CLIENT_ID = os.environ.get("GITHUB_OAUTH_CLIENT_ID", "")
GITHUB_OAUTH_CLIENT_SECRET = os.environ.get("GITHUB_OAUTH_CLIENT_SECRET", "")
# Who gets in, and as what: members of TRIAGE_ORG; a member of a team in TRIAGE_TEAMS (slug=role,
# comma-separated) gets that role (the highest if several), any other member is a viewer.
TRIAGE_ORG = os.environ.get("TRIAGE_ORG", "pytorch")


def parse_triage_teams(raw: str) -> dict[str, str]:
    """Return {team slug: role} from "slug=role,slug=role"; a role that is not one of the dashboard's is an error."""
    teams = {}
    for item in [i.strip() for i in raw.split(",") if i.strip()]:
        slug, sep, role = item.partition("=")
        if not sep or role.strip() not in ("viewer", "triager", "meeting chair"):
            raise ImproperlyConfigured(
                f"TRIAGE_TEAMS item {item!r} is not slug=role with role viewer, triager or meeting chair."
            )
        teams[slug.strip()] = role.strip()
    return teams


TRIAGE_TEAMS = parse_triage_teams(
    os.environ.get("TRIAGE_TEAMS", "pt2-triagers=triager,pt2-triage-chairs=meeting chair")
)
SOCIALACCOUNT_PROVIDERS = {
    "github": {
        # read:org: org and team memberships (who gets in, as what); public_repo: label issues as you.
        "SCOPE": ["read:org", "public_repo"],
        "APPS": (
            [{"client_id": GITHUB_OAUTH_CLIENT_ID, "secret": GITHUB_OAUTH_CLIENT_SECRET, "key": ""}]
            if GITHUB_OAUTH_CLIENT_ID and GITHUB_OAUTH_CLIENT_SECRET
            else []
        ),
    },
}
SOCIALACCOUNT_ADAPTER = "rubric_app.github.signin.SocialAccountAdapter"
ACCOUNT_ADAPTER = "rubric_app.github.signin.AccountAdapter"
# The user's token is kept encrypted by rubric_app/github/credentials.py, never in allauth's plaintext table.
SOCIALACCOUNT_STORE_TOKENS = False
# The account is made from what GitHub vouches for (the login, the name), never through allauth's sign-up form,
# which would let anyone pick a username and an e-mail, and keep the pending token in the session meanwhile.
SOCIALACCOUNT_AUTO_SIGNUP = True
SOCIALACCOUNT_EMAIL_REQUIRED = False
SOCIALACCOUNT_QUERY_EMAIL = False
SOCIALACCOUNT_EMAIL_AUTHENTICATION = False
SOCIALACCOUNT_LOGIN_ON_GET = False
ACCOUNT_EMAIL_VERIFICATION = "none"
GITHUB_QUEUE_LABELS = list(QUEUE_LABELS)
# GitHub asks for at least one second between mutating requests.
GITHUB_WRITE_INTERVAL = env_float("GITHUB_WRITE_INTERVAL", 1.0)
GITHUB_TIMEOUT = env_float("GITHUB_TIMEOUT", 15.0)
# A failed read (5xx, timeout) is retried 5 times, waiting 0, 2x, 4x, 8x, 16x this many seconds (4 s at most).
GITHUB_RETRY_BACKOFF = env_float("GITHUB_RETRY_BACKOFF", 0.25)
# The history backfill (rubric_app/github/history.py) waits for the reset once this many of the hour's requests are
# left: they stay with the queue's sync, the webhooks' reads and the decisions, which share the token.
HISTORY_RATE_RESERVE = int(env_float("HISTORY_RATE_RESERVE", 1000))
# How often the incremental sync also lists the open queue to notice issues deleted or transferred on GitHub, which
# no `since` listing shows (rubric_app/github/sync.py: about one request a hundred queued issues).
DEPARTURE_CHECK_MINUTES = env_float("DEPARTURE_CHECK_MINUTES", 60)
# The beat's history run: how often, and for how long at most (a backfill goes on in slices, its cursor saved).
HISTORY_INTERVAL_MINUTES = env_float("HISTORY_INTERVAL_MINUTES", 60)
HISTORY_BUDGET_MINUTES = env_float("HISTORY_BUDGET_MINUTES", 45)
# Whose identity writes to GitHub (sign-in with GitHub is configured above).
# "user": each decision is written with its triager's own token (GitHub's timeline names them);
# "app": with the site's token (GITHUB_TOKEN or the GitHub App), the audit still naming the triager.
# Unset: "user" when sign-in with GitHub is configured (GITHUB_OAUTH_CLIENT_ID), else "app".
GITHUB_WRITE_AS = os.environ.get("GITHUB_WRITE_AS", "")
if GITHUB_WRITE_AS not in ("", "user", "app"):
    raise ImproperlyConfigured(f"GITHUB_WRITE_AS must be user or app, not {GITHUB_WRITE_AS!r}.")
# The site's own identity may be a GitHub App instead of GITHUB_TOKEN: its installation on GITHUB_REPO.
GITHUB_APP_ID = os.environ.get("GITHUB_APP_ID", "")
GITHUB_APP_PRIVATE_KEY = os.environ.get("GITHUB_APP_PRIVATE_KEY", "")
if not GITHUB_APP_PRIVATE_KEY and os.environ.get("GITHUB_APP_PRIVATE_KEY_FILE"):
    GITHUB_APP_PRIVATE_KEY = Path(os.environ["GITHUB_APP_PRIVATE_KEY_FILE"]).read_text()
if GITHUB_APP_ID and not GITHUB_APP_PRIVATE_KEY:
    raise ImproperlyConfigured("GITHUB_APP_ID is set: give the App's key in GITHUB_APP_PRIVATE_KEY or _FILE.")
# Fernet keys (comma-separated, newest first, for rotation) that encrypt users' GitHub tokens at rest;
# without one, a key derived from SECRET_KEY (development).
TOKEN_ENCRYPTION_KEYS = env_list("TOKEN_ENCRYPTION_KEY")
for _key in TOKEN_ENCRYPTION_KEYS:
    try:
        _valid = len(base64.urlsafe_b64decode(_key.encode())) == 32
    except ValueError:
        _valid = False
    if not _valid:  # said now rather than at the first sign-in; the key itself is not echoed
        raise ImproperlyConfigured(
            "TOKEN_ENCRYPTION_KEY: each key must be 32 url-safe base64-encoded bytes "
            '(make one with python -c "from cryptography.fernet import Fernet; print(Fernet.generate_key().decode())").'
        )
if not TOKEN_ENCRYPTION_KEYS and not DEBUG and GITHUB_OAUTH_CLIENT_ID:
    raise ImproperlyConfigured("TOKEN_ENCRYPTION_KEY must be set when sign-in with GitHub is on and DEBUG is off.")

# Celery. The embedded default uses kombu's filesystem transport: a real broker
# and a real worker process, no service to install.
CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL", "filesystem://")
# A bisection can run for minutes; redeliver only after the longest one could have finished
# (coordinator.longest_run: ten mode timeouts plus 300 s), so that a redelivered message always
# means that the worker which took it died.
_VISIBILITY_TIMEOUT_S = max(3600, int(2 * (10 * env_float("BISECTION_TIMEOUT_S", 120) + 300)))


def filesystem_broker(folder: Path) -> dict:
    """kombu's filesystem transport options for a broker kept in `folder` (made here)."""
    for sub in ("out", "processed", "control"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    return {
        "data_folder_in": str(folder / "out"),
        "data_folder_out": str(folder / "out"),
        "processed_folder": str(folder / "processed"),
        "control_folder": str(folder / "control"),
        "store_processed": False,
    }


if CELERY_BROKER_URL.startswith("filesystem://"):
    CELERY_BROKER_TRANSPORT_OPTIONS = filesystem_broker(VAR_DIR / "broker")
else:
    CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": _VISIBILITY_TIMEOUT_S}
# Bisection runners talk to the coordinator through a broker of their own (docs/deploy.md#runners): each registered
# runner's job queue and report queue (runner.<name>.*, rubric_app/runs/broker.py), which a runner's broker user is
# confined to by the broker's ACL, apart from every queue, result and remote-control channel of the privileged
# processes above. RUNNER_BROKER_URL is how a process reaches it: on the coordinator, a user that may read every
# runner's reports and write its jobs (by default the CELERY_BROKER_URL's; a Redis database of its own is tidier); on a
# runner, that runner's own broker user. The embedded default keeps it in a folder of its own.
RUNNER_BROKER_URL = os.environ.get("RUNNER_BROKER_URL", "") or (
    "filesystem://" if CELERY_BROKER_URL.startswith("filesystem://") else CELERY_BROKER_URL
)
if RUNNER_BROKER_URL.startswith("filesystem://"):
    RUNNER_BROKER_TRANSPORT_OPTIONS = filesystem_broker(VAR_DIR / "runner-broker")
else:
    RUNNER_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": _VISIBILITY_TIMEOUT_S}
# manage: the coordinator creates each registered runner's broker user (Redis ACL SETUSER, its password the runner's
# secret) and deletes it when the runner is revoked, cutting its connections; its broker user needs the ACL commands.
# off: the operator adds the ACL line the runners page shows (deploy/redis-runners.acl).
RUNNER_BROKER_ACL = os.environ.get("RUNNER_BROKER_ACL", "off").strip().lower()
if RUNNER_BROKER_ACL not in ("off", "manage"):
    raise ImproperlyConfigured(f"RUNNER_BROKER_ACL={RUNNER_BROKER_ACL!r}: choose off or manage")
# A runner's own identity (a runner holds these and the RUNNER_BROKER_URL, nothing else): the name and secret an
# operator registered it with (the runners page, or manage.py register_runner).
RUNNER_NAME = os.environ.get("RUNNER_NAME", "")
RUNNER_SECRET = os.environ.get("RUNNER_SECRET", "")
# The lanes a runner takes (a person's runs, the automatic ones, re-checks on a newer build: vocabulary.py); unset,
# every lane of its device.
RUNNER_LANES = env_list("RUNNER_LANES")
CELERY_TASK_ALWAYS_EAGER = False
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_DEFAULT_QUEUE = "default"
# Each task's queue is named where it is sent (rubric_app/dispatch.py): decisions to `github` (one worker with
# concurrency 1: what paces writes), the rest to `default` (the coordinator). A run's job goes to the runner the
# coordinator gave it to, on the runners' broker (rubric_app/runs/assignment.py: a person's runs first).
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# The sweep (rubric_app/tasks.requeue_stuck_task): how often it runs. Work whose message vanished from the broker (a
# decision, a webhook delivery) is sent again at the first sweep after it has waited RESEND_AFTER_S; a run's job is
# given again as soon as its runner's heartbeat shows it neither holds nor waits for it (runs/assignment.py).
SWEEP_MINUTES = env_float("SWEEP_MINUTES", 5)
RESEND_AFTER_S = env_float("RESEND_AFTER_S", 60)
CELERY_BEAT_SCHEDULE = {
    "requeue-stuck-work": {"task": "rubric_app.tasks.requeue_stuck_task", "schedule": timedelta(minutes=SWEEP_MINUTES)},
    # Someone who left a team loses its role within a day (and at once at their next sign-in).
    "refresh-github-roles": {"task": "rubric_app.tasks.refresh_github_roles_task", "schedule": timedelta(days=1)},
    # A labeler trained on the week's history, promoted only through the gate (rubric_app/triage/model_store.py).
    "train-label-model": {"task": "rubric_app.tasks.train_label_model_task", "schedule": timedelta(days=7)},
}
if (
    GITHUB_TOKEN or GITHUB_APP_ID
):  # without a token there is nothing to sync (demo data), and nothing may leave the machine
    CELERY_BEAT_SCHEDULE["sync-queue"] = {
        "task": "rubric_app.tasks.sync_queue_task",
        "schedule": timedelta(minutes=int(env_float("SYNC_INTERVAL_MINUTES", 10))),
    }
    # History: the backfill in slices until done, then what changed since the last run (rubric_app/github/history.py).
    CELERY_BEAT_SCHEDULE["sync-history"] = {
        "task": "rubric_app.tasks.sync_history_task",
        "schedule": timedelta(minutes=HISTORY_INTERVAL_MINUTES),
    }

# Stuck work. Each worker writes a heartbeat (its queues) every WORKER_HEARTBEAT_S; the dashboard
# counts a worker live for WORKER_HEARTBEAT_STALE_S after its last one. A bisection or decision that
# no worker of its queue has taken after QUEUE_WAIT_TIMEOUT_MINUTES ends `failed` with that reason
# (the beat sweep checks every 5 minutes; it re-sends unclaimed work after 15).
WORKER_HEARTBEAT_S = env_float("WORKER_HEARTBEAT_S", 10)
WORKER_HEARTBEAT_STALE_S = env_float("WORKER_HEARTBEAT_STALE_S", 45)
QUEUE_WAIT_TIMEOUT_MINUTES = env_float("QUEUE_WAIT_TIMEOUT_MINUTES", 30)
# A meeting decision is one click: it is held this long before any worker writes it, with an Undo button meanwhile.
MEETING_UNDO_SECONDS = env_float("MEETING_UNDO_SECONDS", 10)

# Bisection: which device this process's worker serves, and the sandbox's limits.
BISECTION_DEVICE = os.environ.get("BISECTION_DEVICE", "cpu")
BISECTION_TIMEOUT_S = env_float("BISECTION_TIMEOUT_S", 120)
BISECTION_MEMORY_MB = int(env_float("BISECTION_MEMORY_MB", 6144))
# The torch builds this worker hosts, each an interpreter with its own torch ("release=/opt/torch-2.13/bin/python,
# nightly=/opt/torch-nightly/bin/python"; docs/bisection.md#torch-builds). Unset: this interpreter, "default".
try:
    TORCH_BUILDS = parse_torch_builds(os.environ.get("TORCH_BUILDS", ""))
except ValueError as exc:
    raise ImproperlyConfigured(str(exc)) from None
# Bisect each repro as it arrives (rubric_app/runs/auto_bisect.py): off, cpu (repros without CUDA) or all.
# `make run`'s demo turns it on (scripts/run.sh); untrusted code, so bounded by these budgets.
AUTO_BISECT = os.environ.get("AUTO_BISECT", "off").strip().lower()
if AUTO_BISECT not in ("off", "cpu", "all"):
    raise ImproperlyConfigured(f"AUTO_BISECT={AUTO_BISECT!r}: choose off, cpu or all")
AUTO_BISECT_PER_HOUR = int(env_float("AUTO_BISECT_PER_HOUR", 20))
AUTO_BISECT_PER_AUTHOR = int(env_float("AUTO_BISECT_PER_AUTHOR", 5))
# An automatic run's compile modes and probes together, after the eager reference: one per-mode timeout by default,
# so a repro that runs every mode to just under its limit costs one limit, not one per mode (harness.bisect).
AUTO_BISECT_BUDGET_S = env_float("AUTO_BISECT_BUDGET_S", BISECTION_TIMEOUT_S)
# Re-checks of open issues' repros on a newer torch build (rubric_app/runs/build_checks.py): a budget of their own, so a
# new nightly's backlog never takes the arrivals' runs.
RECHECK_PER_HOUR = int(env_float("RECHECK_PER_HOUR", 10))

# Who may speak for PyTorch's automation (rubric_app/vocabulary.py): "repro_agent=login;agent=login,login;bot=login".
# Anyone else's "🤖 PT2 Repro Agent" comment or "unable to reproduce on <sha>" is shown as a claim, never used as
# evidence. The default is PyTorch's accounts (docs/engine.md, "Who may speak for the automation").
try:
    AUTOMATION_ACCOUNTS = parse_automation_accounts(os.environ.get("AUTOMATION_ACCOUNTS", DEFAULT_AUTOMATION_ACCOUNTS))
except ValueError as exc:
    raise ImproperlyConfigured(str(exc)) from None

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
    # urllib3 logs request URLs and PyGithub can log headers at DEBUG: keep them quiet so
    # the Authorization header never reaches a log.
    "loggers": {
        "urllib3": {"level": "WARNING"},
        "github": {"level": "WARNING"},
    },
}

# /health (rubric_app/web/health.py): the queues that must have a live worker, and how old the last successful
# sync may be (judged only with a GitHub token) before the check answers 503.
HEALTH_QUEUES = env_list("HEALTH_QUEUES", "github,cpu")
HEALTH_SYNC_STALE_MINUTES = env_float("HEALTH_SYNC_STALE_MINUTES", 60)
# Anonymous /health says only up or down; this bearer token (and signed-in staff) also gets the parts.
HEALTH_TOKEN = os.environ.get("HEALTH_TOKEN", "")
# The proxy's and the orchestrator's plain-http probe is answered, not redirected to https.
SECURE_REDIRECT_EXEMPT = [r"^health$"]

# Optional error reporting: sentry-sdk for the web and worker processes, scrubbed of tokens and issue text.
SENTRY_DSN = os.environ.get("SENTRY_DSN", "")
if SENTRY_DSN:
    from triage_site import sentry

    sentry.init(SENTRY_DSN, environment=os.environ.get("SENTRY_ENVIRONMENT", "production" if not DEBUG else "dev"))
