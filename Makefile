# The two commands of the README.
#   make demo   set up .venv, then run the main job on the embedded DebMT-10 data
#   make test   set up .venv, then run the test suite
SIZE ?= quick

.PHONY: setup demo test
setup:
	bash scripts/setup.sh

demo: setup
	.venv/bin/hltmt-main-job --size $(SIZE)

# two workers (one per core), whole test files to each, so that a file's fixtures are built once
JOBS ?= 2
test: setup
	.venv/bin/python -m pytest -q --durations=30 -n $(JOBS) --dist loadfile tests
