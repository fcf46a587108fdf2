# The dev loop (CONTRIBUTING.md). Every target runs the tools of the project's virtual environment, .venv.
# `make dev` once, then edit and `make test`: the install is editable, so the tests import engine/ as it is
# on disk, not a copy in site-packages.

VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST := $(PY) -m pytest

.PHONY: help dev test test-all regen regen-check schemas docs docs-check lint format typecheck

help:
	@echo "make dev        editable install of the package and its test and dev tools into $(VENV)"
	@echo "make test       the fast tier (pytest's default run) on every core (-n auto)"
	@echo "make test-all   exactly what CI runs (.ci/run): both tiers, pytest --all -n auto"
	@echo "make regen      every generated file: JSON schemas, golden reports, scenario expectations, docs; prints each it rewrote"
	@echo "make regen-check  the same, writing nothing: lists the stale files, fails if there are any"
	@echo "make docs       docs/rules/*.md and docs/facts.md from the rule and fact metadata"
	@echo "make lint       ruff (Python) and sqlfluff (fact SQL)"
	@echo "make format     ruff format, on the files you name: make format FILES='engine/authoring/docs.py'"
	@echo "make typecheck  mypy (configured in pyproject.toml)"

$(PY):
	python3 -m venv $(VENV)

dev: $(PY)
	$(PY) -m pip install -e '.[test,dask,dev]'

# The fast tier on one pytest-xdist worker per core; `$(PYTEST) tests/test_steps.py` runs one file in-process.
# Bytecode is written even where the environment turns it off (PYTHONDONTWRITEBYTECODE, set in many containers):
# without it every worker compiles the package and rewrites every test module's asserts again, run after run.
# worksteal: an idle worker takes tests queued for the other, so neither waits at the end on a long test.
test:
	PYTHONDONTWRITEBYTECODE= $(PYTEST) -n auto --dist worksteal

# The same command as the last line of .ci/run and the README (tests/test_project.py keeps those two equal);
# CI installs the package as a wheel in a fresh .venv first, so a wheel install is what it tests.
test-all:
	$(PYTEST) --all -n auto

# Regenerate everything that is compared with committed files (engine/authoring/regen.py): one `rewrote PATH` line
# per file it changed, then a count, or "nothing changed". Review `git diff` after it.
regen:
	$(PY) -m nsys_diagnose.authoring.regen

regen-check:
	$(PY) -m nsys_diagnose.authoring.regen --check

schemas:
	$(PY) -m nsys_diagnose.reports.schema --write

docs:
	$(PY) -m nsys_diagnose.authoring.docs --write

docs-check:
	$(PY) -m nsys_diagnose.authoring.docs --check

lint:
	$(VENV)/bin/ruff check .
	$(VENV)/bin/sqlfluff lint rules/facts --processes 2

FILES ?=
format:
	@test -n "$(FILES)" || { echo "name the files: make format FILES='engine/authoring/docs.py tests/test_docs.py'"; exit 2; }
	$(VENV)/bin/ruff format $(FILES)

typecheck:
	$(VENV)/bin/mypy
