# The two commands that matter: `make run` and `make test` (see README.md).
SHELL := /bin/bash
HOST ?= 127.0.0.1
PORT ?= 8000
PG_TEST_URL ?= postgres://postgres@127.0.0.1:5432/airlock
PY := .venv/bin/python
# Use the uv on PATH when it runs; otherwise bootstrap one into .tools/.
UV := $(shell uv --version >/dev/null 2>&1 && echo uv || echo .tools/bin/uv)

.PHONY: setup run test test-sqlite test-postgres browser lint bench axe screens

.tools/bin/uv:
	python3 -m venv .tools
	.tools/bin/python -m pip install --quiet uv

# Bytecode compiled once at install: these machines set PYTHONDONTWRITEBYTECODE, so without it every Python
# process (servers, workers, management commands, test workers) compiled its libraries again, ~6 s of CPU each.
# The OpenAI Agents SDK gets an environment of its own: its package `agents` would shadow the app (pyproject.toml).
setup: $(filter .tools/bin/uv,$(UV))
	$(UV) sync --frozen --quiet --compile-bytecode
	UV_PROJECT_ENVIRONMENT=.venv-openai-agents $(UV) sync --frozen --quiet --compile-bytecode --only-group openai-agents
	$(PY) manage.py migrate --noinput -v0
	$(PY) manage.py collectstatic --noinput -v0

run: setup
	$(PY) manage.py seed_demo
	@echo "Airlock console: http://$(HOST):$(PORT)/"
	$(PY) manage.py serve --host $(HOST) --port $(PORT)

# axe-core, the accessibility checker of the browser tests, from the npm registry into .tools/ (the first
# browser test that needs it fetches it too; without npm or the registry it is skipped, except under CI).
axe: setup
	$(PY) -m tests.browser.axe

# Screenshots of every console page at 1366 and 390 px into docs/screens/ (a console of its own with the demo
# data, as `make run` serves it; tests/browser/screens.py).
screens: setup browser
	$(PY) -m tests.browser.screens

# Browser tests drive Debian's Chromium; install it when it is missing and we may.
browser:
	@command -v chromium >/dev/null || { [ "$$(id -u)" = 0 ] && apt-get update -qq && apt-get install -y -qq chromium >/dev/null; } \
		|| { echo "Chromium is missing: apt-get install chromium"; exit 1; }

test: setup browser test-sqlite test-postgres

# pytest-xdist: a worker per core, each with its own test database (and, for the browser and process tests,
# its own servers). PYTEST_WORKERS=0 runs the suite in this one process.
PYTEST_WORKERS ?= auto
# `loadgroup`: a module marked `xdist_group` runs on one worker, so its module-scoped served console starts once.
# `--durations`: the slowest tests, printed after each pass, tell where the suite's time goes (issue 56).
PYTEST := $(PY) -m pytest -n $(PYTEST_WORKERS) --dist loadgroup --durations=25

test-sqlite:
	$(PYTEST)

# The same suite on PostgreSQL (browser tests run on SQLite only: they prove the UI, not the database).
# Each test worker's pool gets 30 connections, not the default 20: a test that answers twenty requests from twenty
# threads at once takes 21, and a connection a previous test's thread still held emptied the pool (CI, 2026-12-06).
# Under CI the pass is never skipped: PostgreSQL down is a failure that names it.
test-postgres:
	@if pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; then \
		DATABASE_URL=$(PG_TEST_URL) DATABASE_POOL_SIZE=30 $(PYTEST) -m "not browser and not processes"; \
	elif [ -n "$$CI" ]; then echo "PostgreSQL is not running on 127.0.0.1:5432: the PostgreSQL pass cannot run (CI)"; exit 1; \
	else echo "PostgreSQL is not running on 127.0.0.1:5432: skipped the PostgreSQL pass"; fi

# Every benchmark (bench/README.md); writes bench/results.md. Needs PostgreSQL and Redis on loopback.
bench: setup
	$(PY) bench/run_all.py

lint: setup
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .
	.venv/bin/mypy .
	cd clients/python && ../../.venv/bin/mypy --python-executable ../../.venv-openai-agents/bin/python \
		airlock_client/openai_agents.py examples/openai_agents_example.py
	.venv/bin/lint-imports --no-cache
