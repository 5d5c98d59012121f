# Two entry points: `make run` (the dashboard on the embedded default) and `make test`.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python

.PHONY: run test

$(VENV)/.installed: requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.txt
	touch $@

run: $(VENV)/.installed
	scripts/run.sh

test: $(VENV)/.installed
	scripts/test.sh
