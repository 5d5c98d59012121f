import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from triage_site.settings import env_bool, parse_database_url

ROOT = Path(__file__).resolve().parent.parent


def test_it_parses_postgres_and_sqlite_urls():
    pg = parse_database_url("postgres://me@127.0.0.1:5432/triage")
    assert pg["ENGINE"] == "django.db.backends.postgresql"
    assert (pg["NAME"], pg["HOST"], pg["PORT"], pg["USER"]) == ("triage", "127.0.0.1", 5432, "me")
    assert parse_database_url("sqlite:////tmp/x.db")["ENGINE"] == "django.db.backends.sqlite3"


@pytest.mark.parametrize("url", ["mongo://x/y", "not a url", "postgres://127.0.0.1:5432/"])
def test_it_explains_a_bad_database_url(url):
    with pytest.raises(ImproperlyConfigured, match="DATABASE_URL"):
        parse_database_url(url)


def test_it_refuses_an_unknown_boolean(monkeypatch):
    monkeypatch.setenv("DEBUG", "maybe")
    with pytest.raises(ImproperlyConfigured, match="DEBUG"):
        env_bool("DEBUG", False)


def _manage(env: dict, *args: str) -> subprocess.CompletedProcess:
    # Start from the host's environment minus what these tests set, and minus the
    # DJANGO_ALLOW_ASYNC_UNSAFE the browser tests' process carries (a deploy error).
    dropped = (
        "DATABASE_URL",
        "SECRET_KEY",
        "DEBUG",
        "CELERY_BROKER_URL",
        "DJANGO_ALLOW_ASYNC_UNSAFE",
        "HTTPS",
        "ALLOWED_HOSTS",
        "SECURE_SSL_REDIRECT",
    )
    clean = {k: v for k, v in os.environ.items() if k not in dropped}
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_it_refuses_to_start_without_a_secret_key_when_debug_is_off(tmp_path):
    result = _manage({"DEBUG": "false", "TRIAGE_VAR_DIR": str(tmp_path)}, "check")
    assert result.returncode != 0
    assert "SECRET_KEY must be set when DEBUG is off" in result.stderr


def test_it_reports_a_bad_database_url_at_start_up(tmp_path):
    result = _manage({"DATABASE_URL": "mongo://127.0.0.1/triage", "TRIAGE_VAR_DIR": str(tmp_path)}, "check")
    assert result.returncode != 0
    assert "DATABASE_URL could not be parsed" in result.stderr


def test_it_passes_the_deploy_check_with_production_settings(tmp_path):
    env = {
        "DEBUG": "false",
        "SECRET_KEY": "x" * 60 + "-not-a-real-key-but-long-and-varied-0123456789",
        "ALLOWED_HOSTS": "triage.example.org",
        "HTTPS": "true",
        "DATABASE_URL": "postgres://postgres@127.0.0.1:5432/test",
        "CELERY_BROKER_URL": "redis://127.0.0.1:6379/0",
        "TRIAGE_VAR_DIR": str(tmp_path),
    }
    result = _manage(env, "check", "--deploy", "--fail-level", "WARNING")
    assert result.returncode == 0, result.stdout + result.stderr


# What a GET of the login page answers on 127.0.0.1 under env, through Django's own request handling.
_GET_LOGIN = (
    "from django.conf import settings; from django.test import Client; "
    "r = Client(HTTP_HOST='127.0.0.1').get('/accounts/login/'); "
    "print('DEBUG', settings.DEBUG, 'STATUS', r.status_code)"
)


def test_it_keeps_debug_local_hosts_and_plain_http_when_only_the_secret_key_is_set(tmp_path):
    # SECRET_KEY alone used to turn DEBUG off: ALLOWED_HOSTS emptied (400), then a 301 to https.
    result = _manage(
        {"SECRET_KEY": "a-local-key-" + "k" * 50, "TRIAGE_VAR_DIR": str(tmp_path)}, "shell", "-c", _GET_LOGIN
    )
    assert result.returncode == 0, result.stderr
    assert "DEBUG True STATUS 200" in result.stdout


def test_it_asks_for_https_to_be_said_when_debug_is_off(tmp_path):
    env = {"DEBUG": "false", "SECRET_KEY": "k" * 60, "TRIAGE_VAR_DIR": str(tmp_path)}
    result = _manage(env, "check")
    assert result.returncode != 0
    assert "set HTTPS=true" in result.stderr and "HTTPS=false" in result.stderr


def test_it_serves_plain_http_on_the_local_hosts_with_debug_off_and_https_false(tmp_path):
    env = {"DEBUG": "false", "HTTPS": "false", "SECRET_KEY": "k" * 60, "TRIAGE_VAR_DIR": str(tmp_path)}
    env["STATIC_ROOT"] = str(tmp_path / "static")  # with DEBUG off, pages link collectstatic's hashed names
    assert _manage(env, "collectstatic", "--noinput").returncode == 0
    result = _manage(env, "shell", "-c", _GET_LOGIN)
    assert result.returncode == 0, result.stderr
    assert "DEBUG False STATUS 200" in result.stdout


def test_it_redirects_to_https_only_when_https_is_on(tmp_path):
    env = {"DEBUG": "false", "HTTPS": "true", "SECRET_KEY": "k" * 60, "TRIAGE_VAR_DIR": str(tmp_path)}
    env["STATIC_ROOT"] = str(tmp_path / "static")
    result = _manage(env, "shell", "-c", _GET_LOGIN)
    assert result.returncode == 0, result.stderr
    assert "STATUS 301" in result.stdout


def test_it_refuses_an_empty_allowed_hosts_at_start_up(tmp_path):
    result = _manage({"ALLOWED_HOSTS": " , ", "TRIAGE_VAR_DIR": str(tmp_path)}, "check")
    assert result.returncode != 0
    assert "ALLOWED_HOSTS is empty" in result.stderr


def test_it_gives_each_test_process_a_broker_database_of_its_own():
    # Two pytest processes on one broker: each one's Celery worker would take the other's tasks.
    from tests.xdist_broker import broker_for

    assert broker_for("redis://127.0.0.1:6379/15", "gw0") == "redis://127.0.0.1:6379/15"
    assert broker_for("redis://127.0.0.1:6379/15", "gw1") == "redis://127.0.0.1:6379/14"
    assert broker_for("redis://127.0.0.1:6379/0", "gw1") == "redis://127.0.0.1:6379/15"  # Redis has 16
    assert (
        broker_for("redis://:secret@cache:6379?ssl_cert_reqs=none", "gw2")
        == "redis://:secret@cache:6379/14?ssl_cert_reqs=none"
    )
    assert broker_for("memory://", "gw1") == "memory://" and broker_for("redis://h/15", "") == "redis://h/15"


def test_it_refuses_an_unknown_github_write_as(tmp_path):
    result = _manage({"GITHUB_WRITE_AS": "bot", "TRIAGE_VAR_DIR": str(tmp_path)}, "check")
    assert result.returncode != 0
    assert "GITHUB_WRITE_AS must be user or app" in result.stderr


def test_it_wants_a_token_encryption_key_for_sign_in_when_debug_is_off(tmp_path):
    env = {
        "DEBUG": "false",
        "HTTPS": "false",
        "SECRET_KEY": "k" * 60,
        "GITHUB_OAUTH_CLIENT_ID": "an-oauth-app",
        "GITHUB_OAUTH_CLIENT_SECRET": "its-secret",
        "TRIAGE_VAR_DIR": str(tmp_path),
    }
    result = _manage(env, "check")
    assert result.returncode != 0 and "TOKEN_ENCRYPTION_KEY must be set" in result.stderr
    key = "bm90LXRoZS1rZXktdGhhdC1lbmNyeXB0ZWQtaXQxMjM="
    assert _manage({**env, "TOKEN_ENCRYPTION_KEY": key}, "check").returncode == 0


def test_it_refuses_a_malformed_token_encryption_key_without_echoing_it(tmp_path):
    result = _manage({"TOKEN_ENCRYPTION_KEY": "short-secret-value", "TRIAGE_VAR_DIR": str(tmp_path)}, "check")
    assert result.returncode != 0 and "32 url-safe base64-encoded bytes" in result.stderr
    assert "short-secret-value" not in result.stderr


def test_it_reads_the_github_apps_key_from_a_file_and_wants_one(tmp_path):
    key_file = tmp_path / "app.pem"
    key_file.write_text("-----BEGIN PRIVATE KEY-----\nnot-a-real-key\n-----END PRIVATE KEY-----\n")
    env = {"GITHUB_APP_ID": "12345", "TRIAGE_VAR_DIR": str(tmp_path)}
    read = "from django.conf import settings; print('KEY', 'not-a-real-key' in settings.GITHUB_APP_PRIVATE_KEY)"
    result = _manage({**env, "GITHUB_APP_PRIVATE_KEY_FILE": str(key_file)}, "shell", "-c", read)
    assert result.returncode == 0 and "KEY True" in result.stdout, result.stderr
    missing = _manage(env, "check")
    assert missing.returncode != 0 and "GITHUB_APP_PRIVATE_KEY or _FILE" in missing.stderr
