#!/usr/bin/env bash
# Run the whole suite against the real setup: PostgreSQL, Redis, real Celery workers,
# real torch, and Debian's Chromium for the browser tests.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}

scripts/services.sh
if [ ! -x /usr/bin/chromium ] && [ "$(id -u)" = 0 ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi

export DATABASE_URL=${TEST_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/test}
export CELERY_BROKER_URL=${TEST_CELERY_BROKER_URL:-redis://127.0.0.1:6379/15}
unset GITHUB_TOKEN
# Two processes (tests/xdist_broker.py gives each its own broker; pytest-django its own database): the
# suite mostly waits on workers, sandboxes and browsers. A file's tests stay in one process (its module
# fixtures, such as the sandbox's fork server, start once). TEST_PROCESSES=0 runs it in this process.
exec "$PY" -m pytest -n "${TEST_PROCESSES:-2}" --dist loadfile "$@"
