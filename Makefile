# Two commands on a fresh machine: `make demo` and `make test` (each sets up .venv first);
# `make test-fast` after each edit (the tests not marked slow or multiprocess, few Hypothesis
# examples, compiled programs kept in .cache/ between runs); `make docs` builds the
# documentation site (strict) into site/.
PYTHON ?= python3.12
VENV := .venv
BIN := $(VENV)/bin

.PHONY: setup demo test test-fast test-examples lint bench docs

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[test]"
	touch $@

demo: setup
	$(BIN)/bernmf demo

test: setup
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -n 2 --dist worksteal -q

test-fast: setup
	$(BIN)/ruff check .
	BERNMF_COMPILE_CACHE=$(CURDIR)/.cache/compile BERNMF_HYPOTHESIS_PROFILE=fast \
		$(BIN)/python -m pytest -n 2 --dist worksteal -q -m "not slow and not multiprocess"

# The example engine package (examples/bernmf-blackjax) in an environment of its own, with
# bernmf's versions pinned: installed there, its plugins do not reach bernmf's own tests.
EXAMPLES_VENV := .venv-examples
test-examples: setup
	$(PYTHON) -m venv $(EXAMPLES_VENV)
	$(BIN)/pip freeze --exclude-editable > $(EXAMPLES_VENV)/constraints.txt
	$(EXAMPLES_VENV)/bin/pip install --quiet -c $(EXAMPLES_VENV)/constraints.txt \
		-e . -e examples/bernmf-blackjax pytest
	cd examples/bernmf-blackjax && $(CURDIR)/$(EXAMPLES_VENV)/bin/python -m pytest -q

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

bench: setup
	$(BIN)/python benchmarks/mm_speed.py

docs: $(VENV)/.docs-installed
	$(BIN)/mkdocs build --strict --quiet

$(VENV)/.docs-installed: $(VENV)/.installed pyproject.toml
	$(BIN)/pip install --quiet -e ".[docs]"
	touch $@
