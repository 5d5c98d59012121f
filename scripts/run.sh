#!/usr/bin/env bash
# Serve the dashboard with its Celery workers. With no env vars: SQLite, a filesystem
# broker and the demo issues (no GitHub token means no sync).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
PORT=${PORT:-8000}

"$PY" manage.py migrate --noinput
if [ -z "${GITHUB_TOKEN:-}" ]; then
  "$PY" manage.py load_demo --users
else
  "$PY" manage.py sync_queue
fi

# Writes to GitHub go through one single-concurrency worker: that is what paces them.
"$PY" -m celery -A triage_site worker -n github@%h -Q github --concurrency 1 --loglevel INFO &
writer=$!
# The default worker also runs beat (-B): the sweep that ends or re-sends stuck work (a run no
# worker takes, a decision whose worker died) and, with a token, the periodic incremental sync.
beat="-B -s ${TRIAGE_VAR_DIR:-var}/celerybeat-schedule"
"$PY" -m celery -A triage_site worker -n cpu@%h -Q default,cpu --concurrency 2 --loglevel INFO $beat &
worker=$!
trap 'kill $writer $worker 2>/dev/null; wait' EXIT INT TERM

echo "Dashboard: http://127.0.0.1:$PORT/  (demo accounts: triager/triager, chair/chair, viewer/viewer)"
"$PY" manage.py runserver "127.0.0.1:$PORT" --noreload
