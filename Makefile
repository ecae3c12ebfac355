# Two commands do all the set-up on a fresh machine (see README.md):
#   make serve   # virtual environment + pinned packages + front-end assets, then a live-reload preview
#   make test    # the same set-up, then every check and test (browser tests need Debian's chromium)
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: help setup serve build pdf test check fix labs-sync lab bench gpu-check bench-site coverage lock clean
help:
	@echo "make serve      preview at http://$(HOST):$(PORT)/ with live reload (sets everything up)"
	@echo "make test       all checks and tests"
	@echo "make build      strict production build into site/"
	@echo "make pdf        the offline edition: every page on one page (site/print_page/) and site/handbook.pdf"
	@echo "make check      source checks only (front matter, names, typography, labs), no build"
	@echo "make fix        rewrite Chinese-English typography with autocorrect"
	@echo "make labs-sync  regenerate every lab's setup cell from tools/lab_setup.py, strip outputs"
	@echo "make lab NB=notebooks/<section>/<slug>.ipynb   execute one lab in a fresh kernel"
	@echo "make bench      time the labs' kernels on an NVIDIA GPU, write data/bench/<gpu>/*.json"
	@echo "make gpu-check  on an NVIDIA GPU: every lab in GPU mode, every .cu listing compiled and run"
	@echo "                (GPU_PYTHON=python3: use an interpreter whose torch is a CUDA build; ARGS=... passes options)"
	@echo "make bench-site build and rebuild times, search latency, page weights (needs chromium);"
	@echo "                SCALE=1 measures a generated copy with 200 pages and 60 labs (tools/scale.py)"
	@echo "make coverage   answered/total questions of the question bank per layer, and the unanswered ones;"
	@echo "                every layer's canon (data/canon) covered per layer and per field, and the uncovered topics"
	@echo "make lock       re-resolve requirements.in into the hashed requirements.txt"

$(BIN)/.installed: requirements.txt
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python >= 3.11 is required")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --require-hashes -r requirements.txt
	touch $@

node_modules/.installed: package.json package-lock.json
	npm ci --no-audit --no-fund
	touch $@

setup: $(BIN)/.installed node_modules/.installed

# Labs missing from the execution cache are shown unexecuted (with a banner) and executed in the
# background; each page switches to its executed version when it is ready.
serve: setup
	LABS_EXECUTE=background NO_MKDOCS_2_WARNING=1 SITE_URL=http://$(HOST):$(PORT)/ $(BIN)/mkdocs serve --dev-addr $(HOST):$(PORT) --livereload

build: setup
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

pdf: setup
	$(BIN)/python -m tools.pdf site

check: setup
	$(BIN)/python -m tools.checks source
	$(BIN)/python -m tools.canon check

fix: setup
	$(BIN)/python -m tools.checks fix

labs-sync: setup
	$(BIN)/python -m tools.labs sync

lab: setup
	$(BIN)/python -m tools.labs run $(NB)

test: setup
	$(BIN)/python -m pytest

# The lock pins the CPU build of torch, so on a GPU machine the GPU commands take an interpreter whose
# torch is a CUDA build: `make gpu-check GPU_PYTHON=python3` (README, "GPU contributors"). Without
# GPU_PYTHON they use the locked environment and say so when its torch cannot see the GPU.
GPU_PYTHON ?=
GPU_RUN = $(if $(GPU_PYTHON),$(GPU_PYTHON),$(BIN)/python)

bench: $(if $(GPU_PYTHON),,setup)
	$(GPU_RUN) -m bench $(ARGS)

gpu-check: $(if $(GPU_PYTHON),,setup)
	$(GPU_RUN) -m bench.gpu_check $(ARGS)

bench-site: setup
	$(BIN)/python -m tools.sitebench $(if $(SCALE),--scale)

coverage: setup
	$(BIN)/python -m tools.questions coverage
	$(BIN)/python -m tools.canon


lock: $(BIN)/.installed
	$(BIN)/python -m pip install --quiet uv==0.13.8
	$(BIN)/uv pip compile --quiet --python-version 3.11 --generate-hashes --custom-compile-command "make lock" \
		-o requirements.txt requirements.in

clean:
	rm -rf site .cache .pytest_cache test-results
