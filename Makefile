# The two commands: `make demo` (the main job) and `make test` (the test suite). Both set everything up first.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test up status bench clean

$(STAMP): pyproject.toml Makefile
	command -v bwrap >/dev/null && command -v chromium >/dev/null && command -v chromedriver >/dev/null || \
		(apt-get update -qq && apt-get install -y -qq bubblewrap chromium chromium-driver)
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test,megatron]' --config-settings editable_mode=compat
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/openclaw-rl demo

test: $(STAMP)
	$(BIN)/python -m pytest -q -rs

up: $(STAMP)
	$(BIN)/openclaw-rl up

status: $(STAMP)
	$(BIN)/openclaw-rl status

bench: $(STAMP)
	$(BIN)/openclaw-rl bench all --json

clean:
	rm -rf $(VENV) .runtime .pytest_cache
