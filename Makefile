# Everything runs from the project's own virtualenv at .venv (created by `make install`).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install lint test test-fast demo bench clean

install: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	@touch $(STAMP)

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

test: lint
	$(BIN)/pytest -q -p no:cacheprovider

test-fast: install
	$(BIN)/pytest -q -p no:cacheprovider -m "not e2e and not slow"

demo: install
	$(BIN)/python -m epp.demo

bench: install
	$(BIN)/epp-bench all

clean:
	rm -rf $(VENV) build dist *.egg-info .mypy_cache .ruff_cache .pytest_cache
