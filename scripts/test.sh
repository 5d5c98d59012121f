#!/usr/bin/env bash
# Run the whole suite against the real setup: PostgreSQL, Redis, real Celery workers,
# real torch, and Debian's Chromium for the browser tests.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}

SLOW_MARKERS="worker or browser or torch"
fast=""
if [ "${1:-}" = "--fast" ]; then
  fast=1
  shift
fi

scripts/services.sh
if [ -z "$fast" ] && [ ! -x /usr/bin/chromium ] && [ "$(id -u)" = 0 ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi

export DATABASE_URL=${TEST_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/test}
export CELERY_BROKER_URL=${TEST_CELERY_BROKER_URL:-redis://127.0.0.1:6379/15}
unset GITHUB_TOKEN
# Keep the bytecode (and pytest's rewritten asserts) between runs: without it every process of every run spends
# 6 s compiling the suite again.
unset PYTHONDONTWRITEBYTECODE
# Two processes (tests/xdist_broker.py gives each its own broker; pytest-django its own database): the
# suite mostly waits on workers, sandboxes and browsers. A file's tests stay in one process (its module
# fixtures, such as the sandbox's fork server, start once). TEST_PROCESSES=0 runs it in this process.
if [ -n "$fast" ]; then
  # Say what is left out, per file, before running the rest (`make test` runs everything).
  echo "==> make test-fast leaves out the tests marked $SLOW_MARKERS (pytest.ini):"
  "$PY" -m pytest --collect-only -q -m "$SLOW_MARKERS" "$@" 2>/dev/null \
    | sed -n 's/^\(tests\/[^:]*\)::.*/\1/p' | sort | uniq -c | sed 's/^ */    /'
  exec "$PY" -m pytest -n "${TEST_PROCESSES:-2}" --dist loadfile -m "not ($SLOW_MARKERS)" "$@"
fi
exec "$PY" -m pytest -n "${TEST_PROCESSES:-2}" --dist loadfile "$@"
