# The commands of the README.
#   make demo          set up .venv, then run the main job on the embedded DebMT-10 data
#   make test          set up .venv, then run the fast tier of the tests (unit tests, the golden test,
#                      one end-to-end path of each command)
#   make test-full     the fast tier, then every other test: the whole suite, each test once
#   make check-python  install into a fresh environment on each of PYTHONS and translate a line there
#   make lint          the house style: ruff's formatter (check only) and linter, as ruff.toml sets them
#   make format        let ruff's formatter write the house style
SIZE ?= quick

.PHONY: setup demo test test-full check-python lint format
setup:
	bash scripts/setup.sh

demo: setup
	.venv/bin/hltmt-main-job --size $(SIZE)

# two workers (one per core), whole test files to each, so that a file's fixtures are built once;
# tests/tiers.py marks every test slow that its file does not mark fast
JOBS ?= 2
PYTEST = .venv/bin/python -m pytest -q --durations=30 -n $(JOBS) --dist loadfile
test: setup
	$(PYTEST) -m "not slow" tests

# both tiers run even when the first fails; the target fails when either does (pytest exits 5 when
# it selects no test: no slow test is not a failure)
test-full: setup
	@fast=0; rest=0; \
	echo '$(PYTEST) -m "not slow" tests'; $(PYTEST) -m "not slow" tests || fast=$$?; \
	echo '$(PYTEST) -m slow tests'; $(PYTEST) -m slow tests || rest=$$?; \
	if [ $$rest -eq 5 ]; then rest=0; fi; \
	echo "make test-full: the fast tier exited $$fast, the rest $$rest"; \
	[ $$fast -eq 0 ] && [ $$rest -eq 0 ]

PYTHONS ?= 3.12 3.13
check-python:
	bash scripts/check_python.sh $(PYTHONS)

lint: setup
	.venv/bin/ruff format --check .
	.venv/bin/ruff check .

format: setup
	.venv/bin/ruff check --select I --fix .
	.venv/bin/ruff format .
