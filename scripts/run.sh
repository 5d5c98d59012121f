#!/usr/bin/env bash
# Serve the dashboard with its Celery workers on 127.0.0.1:$PORT (default 8000).
# With no GITHUB_TOKEN it is the demo: the demo issues, and a demo GitHub on 127.0.0.1
# (rubric_app/demo/github_server.py) that syncs, takes label writes and is synced again;
# nothing leaves the machine. Workers log to $TRIAGE_VAR_DIR/log/ (default var/log/);
# the dashboard's address is printed last, once everything is up.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
PORT=${PORT:-8000}
VAR=${TRIAGE_VAR_DIR:-var}
LOGS="$VAR/log"
mkdir -p "$LOGS"

pids=()
stop() { [ ${#pids[@]} -eq 0 ] || kill "${pids[@]}" 2>/dev/null || true; wait || true; }
trap stop EXIT
# Ctrl-C (or TERM) is how the demo is meant to stop: a clean stop (the EXIT trap stops the others), exit 0, so make
# reports no error.
trap 'exit 0' INT TERM
step() { printf '==> %s\n' "$*"; }

wait_for() {  # wait_for SECONDS DESCRIPTION COMMAND...: poll until COMMAND succeeds
  local seconds=$1 what=$2; shift 2
  for _ in $(seq 1 "$((seconds * 5))"); do "$@" >/dev/null 2>&1 && return 0; sleep 0.2; done
  echo "run.sh: $what did not come up within ${seconds} s (see $LOGS/)" >&2
  exit 1
}

step "Database: migrating"
"$PY" manage.py migrate --noinput

demo_github=""
if [ -n "${GITHUB_TOKEN:-}" ]; then
  step "GitHub: syncing the queue of ${GITHUB_REPO:-pytorch/pytorch}"
  "$PY" manage.py sync_queue
elif [ -z "${GITHUB_API_URL:-}" ]; then
  step "Demo mode (no GITHUB_TOKEN): starting the demo GitHub on 127.0.0.1 (log: $LOGS/demo-github.log)"
  # Sign in with GitHub against the demo GitHub: an OAuth app made up for this run (the demo GitHub
  # and the dashboard read the same two variables; the secret is never printed).
  export GITHUB_OAUTH_CLIENT_ID="${GITHUB_OAUTH_CLIENT_ID:-demo-dashboard}"
  GITHUB_OAUTH_CLIENT_SECRET="${GITHUB_OAUTH_CLIENT_SECRET:-$("$PY" -c 'import secrets; print(secrets.token_hex(20))')}"
  export GITHUB_OAUTH_CLIENT_SECRET
  "$PY" -u -m rubric_app.demo.github_http --port "${DEMO_GITHUB_PORT:-0}" >"$LOGS/demo-github.log" 2>&1 &
  pids+=($!)
  wait_for 30 "the demo GitHub" grep -q "^demo GitHub: http" "$LOGS/demo-github.log"
  demo_github=$(sed -n 's/^demo GitHub: \(http[^ ]*\).*/\1/p' "$LOGS/demo-github.log")
  export GITHUB_API_URL="$demo_github" GITHUB_URL="$demo_github"
  step "Demo mode: loading the demo issues and accounts, then syncing them from the demo GitHub"
  "$PY" manage.py load_demo --users
  "$PY" manage.py sync_queue --full
  # The demo bisects its issues' repros as they arrive, within the budgets (README: AUTO_BISECT).
  export AUTO_BISECT=${AUTO_BISECT:-cpu}
  "$PY" manage.py auto_bisect
else
  # No token and an API URL of your own: the demo data; Apply works only if that URL is on this machine.
  step "No GITHUB_TOKEN: loading the demo issues (GITHUB_API_URL=$GITHUB_API_URL)"
  "$PY" manage.py load_demo --users
fi

# The runners' registrations first, before any worker writes: on the embedded SQLite a registration racing the
# coordinator's first writes (the automatic runs just queued) was refused as "database is locked".
register() { "$PY" manage.py register_runner "$1" --device "${BISECTION_DEVICE:-cpu}" --rotate --secret-only; }
cpu_secret=$(register cpu)
auto_secret=$(register auto)

# github: GitHub writes, one at a time (concurrency 1 is what paces them).
step "Workers: github (label writes), default (the coordinator: it gives runs to runners and reads their signed reports; webhooks, rubric refreshes) + beat (periodic sync, stuck-work sweep), and two registered bisection runners holding no secret but their own: cpu (people's runs) and auto (automatic runs, re-checks)"
"$PY" -m celery -A triage_site worker -n github@%h -Q github --concurrency 1 --loglevel INFO \
  >"$LOGS/worker-github.log" 2>&1 &
pids+=($!)
# default: the coordinator, with the database; -B runs beat in it: the periodic sync (with a token or the demo GitHub)
# and the sweep that re-sends work whose task never reached a worker.
"$PY" -m celery -A triage_site worker -n default@%h -Q default --concurrency 2 --loglevel INFO \
  -B -s "$VAR/celerybeat-schedule" >"$LOGS/worker-default.log" 2>&1 &
pids+=($!)

# The runners know the runners' broker (kombu's filesystem broker under $VAR/runner-broker), their registered name
# and secret, and their own settings, nothing else: no database, no GitHub token, no SECRET_KEY, not the dashboard's
# broker (docs/bisection.md#runners). Each start gives them new secrets (the old ones stop counting). auto takes the
# automatic runs and the re-checks on a newer torch build, one at a time, apart from cpu: a person's run never waits
# behind them.
# A broker of your own (CELERY_BROKER_URL) serves the runners too unless RUNNER_BROKER_URL names theirs.
runner_broker=${RUNNER_BROKER_URL:-${CELERY_BROKER_URL:-}}
runner() {  # runner NAME SECRET LANES: a registered bisection runner with a scrubbed environment
  env -i PATH="$PATH" TRIAGE_VAR_DIR="$VAR" PYTHONUNBUFFERED=1 RUNNER_NAME="$1" RUNNER_SECRET="$2" RUNNER_LANES="$3" \
    ${runner_broker:+RUNNER_BROKER_URL="$runner_broker"} ${TORCH_BUILDS:+TORCH_BUILDS="$TORCH_BUILDS"} \
    ${BISECTION_DEVICE:+BISECTION_DEVICE="$BISECTION_DEVICE"} ${LOG_LEVEL:+LOG_LEVEL="$LOG_LEVEL"} \
    "$PY" -m celery -A triage_site.runner worker -n "$1@%h" --concurrency 1 --loglevel INFO \
    >"$LOGS/worker-$1.log" 2>&1 &
  pids+=($!)
}
runner cpu "$cpu_secret" cpu
runner auto "$auto_secret" cpu_auto,cpu_recheck

"$PY" manage.py runserver "127.0.0.1:$PORT" --noreload >"$LOGS/web.log" 2>&1 &
pids+=($!)
wait_for 60 "the web server on 127.0.0.1:$PORT" "$PY" -c "import socket; socket.create_connection(('127.0.0.1', $PORT), 1)"

echo
echo "  Dashboard:   http://127.0.0.1:$PORT/"
echo "  Sign in as:  triager/triager, chair/chair (meeting decisions), viewer/viewer (read-only), operator/operator (runners)"
if [ -n "$demo_github" ]; then
  echo "  Demo GitHub: $demo_github (no GITHUB_TOKEN: Apply writes there; nothing leaves this machine)"
  echo "  Or:          Sign in with GitHub, then pick demo-triager, demo-chair, demo-member (viewer) or"
  echo "               demo-outsider (refused) on the demo GitHub's page"
fi
echo "  Logs:        $LOGS/web.log, $LOGS/worker-{github,default,cpu,auto}.log"
echo "  Stop:        Ctrl-C"
echo
wait -n "${pids[@]}"
echo "run.sh: a process stopped (see $LOGS/); stopping the others" >&2
exit 1
