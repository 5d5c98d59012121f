# Two entry points: `make run` (the dashboard on the embedded default) and `make test`.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python

.PHONY: run test test-fast lint

# pip prints a line per package and a download bar (torch alone is minutes): progress, not silence.
$(VENV)/.installed: requirements.txt
	@echo "==> Creating the virtualenv $(VENV) with $(PYTHON)"
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade pip
	@echo "==> Installing requirements.txt (torch included: several minutes on a first install)"
	$(PY) -m pip install -r requirements.txt
	@echo "==> Installed"
	touch $@

run: $(VENV)/.installed
	scripts/run.sh

test: $(VENV)/.installed
	scripts/test.sh

# The suite less what needs a real Celery worker, Chromium or torch in the sandbox (pytest.ini's markers), for
# the edit-test loop; it prints what it left out. CI runs `make test`, the whole suite.
test-fast: $(VENV)/.installed
	scripts/test.sh --fast

# ruff.toml: the lint rules and the format (line length 120) the code keeps.
lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
