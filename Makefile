# SDE Explorer — two commands do everything:
#   make run   set up .venv (if needed) and open the dashboard on the bundled demo workspace
#   make test  set up .venv with the dev tools (if needed), lint (ruff, mypy) and run the tests
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# Re-install only when a requirements file changes (stamp named by their content hash).
REQ_HASH := $(shell cat requirements.txt requirements-dev.txt pyproject.toml | sha256sum | cut -c1-12)
RUN_STAMP  := $(VENV)/.run-$(REQ_HASH)
TEST_STAMP := $(VENV)/.test-$(REQ_HASH)
# --durations=25: the 25 slowest tests, printed after every run (the suite's time budget).
PYTEST_ARGS ?= -x -q --durations=25

.PHONY: run test test-slow lint bench clean-venv browser-setup

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(RUN_STAMP): $(BIN)/python requirements.txt pyproject.toml
	$(BIN)/pip install --quiet -r requirements.txt
	$(BIN)/pip install --quiet --no-deps -e .
	touch $@

$(TEST_STAMP): $(RUN_STAMP) requirements-dev.txt
	$(BIN)/pip install --quiet -r requirements-dev.txt
	touch $@

run: $(RUN_STAMP)
	$(BIN)/python serve.py

# make test: lint and every test but the slow ones (`-m "not slow"`: browser tests, demo
# builds, Ray, whole evaluations in child processes); make test-slow: those; CI runs both.
test: lint browser-setup
	$(BIN)/python -m pytest $(PYTEST_ARGS) -m "not slow"

test-slow: $(TEST_STAMP) browser-setup
	$(BIN)/python -m pytest $(PYTEST_ARGS) -m slow

# Style and types: ruff (lint + format) and mypy on sde_core, pages/ and app.py ([tool.mypy]
# in pyproject.toml; its incremental cache lives in .mypy_cache).
lint: $(TEST_STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m mypy

bench: $(TEST_STAMP)
	$(BIN)/python bench/hsic_bench.py

# The browser tests drive the system Chromium (Playwright never downloads one); the PDF test
# renders page 1 with poppler-utils' pdftoppm.
# As root, install Debian's chromium when it is missing; otherwise the test skips outside CI.
browser-setup:
	@if command -v chromium >/dev/null 2>&1 && command -v pdftoppm >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium poppler-utils; \
	else echo "browser-setup: chromium or pdftoppm missing and not root; those tests will skip"; fi

clean-venv:
	rm -rf $(VENV)
