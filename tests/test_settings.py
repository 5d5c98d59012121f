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
    dropped = ("DATABASE_URL", "SECRET_KEY", "DEBUG", "CELERY_BROKER_URL", "DJANGO_ALLOW_ASYNC_UNSAFE")
    clean = {k: v for k, v in os.environ.items() if k not in dropped}
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env={**clean, **env}, capture_output=True, text=True, timeout=120
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
        "DATABASE_URL": "postgres://postgres@127.0.0.1:5432/test",
        "CELERY_BROKER_URL": "redis://127.0.0.1:6379/0",
        "TRIAGE_VAR_DIR": str(tmp_path),
    }
    result = _manage(env, "check", "--deploy", "--fail-level", "WARNING")
    assert result.returncode == 0, result.stdout + result.stderr
