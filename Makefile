# Everything runs from the project's own virtualenv at .venv (created by `make install`).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install lint test test-fast test-min test-matrix demo bench clean

install: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test,sim,bench]'
	@touch $(STAMP)

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

test: lint
	$(BIN)/pytest -q -p no:cacheprovider

test-fast: install
	$(BIN)/pytest -q -p no:cacheprovider -m "not e2e and not slow"

# The fast tests against the oldest versions pyproject.toml allows (constraints/minimums.txt), on
# Python 3.11, in their own virtualenv .venv-min.
test-min: .venv-min/.installed
	.venv-min/bin/pytest -q -p no:cacheprovider -m "not e2e and not slow"

.venv-min/.installed: pyproject.toml constraints/minimums.txt
	rm -rf .venv-min
	$(PY) -m venv .venv-min
	.venv-min/bin/python -m pip install --quiet --upgrade pip
	.venv-min/bin/python -m pip install --quiet -c constraints/minimums.txt -e '.[test,sim,bench]'
	@touch $@

# The fast tests on every supported Python: 3.11 is .venv (what `make test` uses); 3.12 and 3.13 get
# .venv-3.12 and .venv-3.13. Interpreters: PY312 / PY313, by default pyenv's (called directly: its
# shims refuse to run outside a pyenv-selected directory).
PYENV_ROOT ?= $(shell pyenv root 2>/dev/null || echo $(HOME)/.pyenv)
PY312 ?= $(lastword $(sort $(wildcard $(PYENV_ROOT)/versions/3.12.*/bin/python3)))
PY313 ?= $(lastword $(sort $(wildcard $(PYENV_ROOT)/versions/3.13.*/bin/python3)))

test-matrix: test-fast .venv-3.12/.installed .venv-3.13/.installed
	.venv-3.12/bin/pytest -q -p no:cacheprovider -m "not e2e and not slow"
	.venv-3.13/bin/pytest -q -p no:cacheprovider -m "not e2e and not slow"

.venv-3.12/.installed .venv-3.13/.installed: .venv-%/.installed: pyproject.toml
	@test -n "$(PY$(subst .,,$*))" || { echo "no Python $* found: set PY$(subst .,,$*)=/path/to/python$*"; exit 1; }
	rm -rf .venv-$*
	$(PY$(subst .,,$*)) -m venv .venv-$*
	.venv-$*/bin/python -m pip install --quiet --upgrade pip
	.venv-$*/bin/python -m pip install --quiet -e '.[test,sim,bench]'
	@touch $@

demo: install
	$(BIN)/python -m devtools.demo

bench: install
	$(BIN)/epp-bench all

clean:
	rm -rf $(VENV) .venv-min .venv-3.12 .venv-3.13 build dist *.egg-info .mypy_cache .ruff_cache .pytest_cache
