# The two commands: `make demo` (the main job) and `make test` (the test suite). Both set everything up first, from
# requirements.lock only (every dependency, transitive ones too, pinned with hashes). `make lock` refreshes the lock.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
LOCK := requirements.lock
LOCKED := $(VENV)/.locked
INSTALLED := $(VENV)/.installed
LOCK_TOOL := pip-tools==7.6.2
LOCK_FLAGS := --extra test --extra megatron --generate-hashes --allow-unsafe --strip-extras \
	--no-emit-index-url --no-emit-find-links
SYSDEPS := bubblewrap chromium chromium-driver

.PHONY: demo test lint check-lock sysdeps lock up status bench clean

# A new lock means a new venv: what the old lock installed and the new one drops must not stay behind.
$(LOCKED): $(LOCK)
	rm -rf $(VENV)
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check --require-hashes --no-deps -r $(LOCK)
	touch $(LOCKED)

# The project itself: no dependencies (the lock has them all) and no build isolation (setuptools comes from the lock).
$(INSTALLED): $(LOCKED) pyproject.toml
	$(BIN)/pip install -q --disable-pip-version-check --no-deps --no-build-isolation -e . \
		--config-settings editable_mode=compat
	$(BIN)/python scripts/check_lock.py
	touch $(INSTALLED)

# What the sandboxed envs need (bubblewrap for every env, Chromium for the GUI env); the demo needs none of it.
sysdeps:
	@command -v bwrap >/dev/null && command -v chromium >/dev/null && command -v chromedriver >/dev/null || \
		(apt-get update -qq && apt-get install -y -qq $(SYSDEPS))

check-lock: $(INSTALLED)
	$(BIN)/python scripts/check_lock.py

demo: $(INSTALLED)
	$(BIN)/python scripts/check_lock.py
	$(BIN)/openclaw-rl demo

# ruff with the rule set in pyproject.toml (import order, unused and undefined names, line length) before the suite.
lint: $(INSTALLED)
	$(BIN)/ruff check .

test: $(INSTALLED) sysdeps
	$(BIN)/python scripts/check_lock.py
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q -rs

# Refresh the lock on purpose: resolve pyproject.toml's pins and extras anew, with hashes. `make lock` keeps every
# locked version that still fits (use it after adding or changing a dependency); `make lock UPGRADE=1` takes the newest
# allowed release of everything. Review the diff, run `make test`, commit both files together.
lock:
	rm -rf .lockvenv
	$(PY) -m venv .lockvenv
	.lockvenv/bin/pip install -q --disable-pip-version-check $(LOCK_TOOL)
	.lockvenv/bin/pip-compile -q $(if $(UPGRADE),--upgrade) $(LOCK_FLAGS) -o $(LOCK) pyproject.toml
	rm -rf .lockvenv

up: $(INSTALLED)
	$(BIN)/openclaw-rl up

status: $(INSTALLED)
	$(BIN)/openclaw-rl status

bench: $(INSTALLED)
	$(BIN)/openclaw-rl bench all --json

clean:
	rm -rf $(VENV) .runtime .pytest_cache
