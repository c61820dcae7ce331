# The two commands in the README: `make demo` (the main job) and `make test`.
# Both do all set-up on a fresh machine through scripts/setup.sh.
VENV := .venv
BIN := $(VENV)/bin

.PHONY: setup demo test lint format gpu-check

setup:
	@./scripts/setup.sh

demo: setup
	$(BIN)/tritonconv demo

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# one worker per core (CI has two); worksteal: an idle worker takes queued tests from a busy one
test: lint
	$(BIN)/python -m pytest -q -n auto --dist worksteal

format: setup
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

gpu-check:
	./scripts/gpu_check.sh
