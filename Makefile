# The two commands of the README.
#   make demo   set up .venv, then run the main job on the embedded DebMT-10 data
#   make test   set up .venv, then run the test suite
SIZE ?= quick

.PHONY: setup demo test
setup:
	bash scripts/setup.sh

demo: setup
	.venv/bin/hltmt-main-job --size $(SIZE)

test: setup
	.venv/bin/python -m pytest -q --durations=30 tests
