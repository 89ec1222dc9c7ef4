# The verbs people type. `make help` lists them.
SHELL := /bin/bash
PY    ?= python3.11
VENV  := .venv
BIN   := $(VENV)/bin
export NO_MKDOCS_2_WARNING := 1
export PYTHONPATH := $(CURDIR)$(if $(PYTHONPATH),:$(PYTHONPATH))

.PHONY: help setup browser-deps serve build check test publish-check gpu-run gpu-manifest new-question clean

help:  ## list the commands
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-14s %s\n", $$1, $$2}'

$(BIN)/.stamp: requirements.txt
	@command -v $(PY) >/dev/null || { echo "setup: $(PY) not found (the toolchain is pinned for Python 3.11)"; exit 1; }
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q -r requirements.txt
	touch $@

node_modules/.stamp: package.json package-lock.json
	npm ci --no-audit --no-fund --ignore-scripts
	touch $@

setup: $(BIN)/.stamp node_modules/.stamp  ## create .venv and node_modules from the pinned files

browser-deps:
	@if [ ! -x /usr/bin/chromium ] || ! fc-list | grep -qi "noto sans cjk"; then \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -q && $$SUDO apt-get install -y -q --no-install-recommends chromium fonts-noto-cjk; \
	fi

serve: setup  ## serve the site on http://127.0.0.1:8000/ai-infra-kb/
	$(BIN)/mkdocs serve --dev-addr 127.0.0.1:8000

build: setup  ## build the site into site/
	$(BIN)/mkdocs build --strict

# Both lanes end with the labs whose GPU results are not fresh (kb/freshness.py): a state, not a failure.
FRESHNESS := $(BIN)/python -m kb.freshness --report

check: setup  ## the fast lane (< 1 min): page contract, results verification, hooks, snippet unit tests
	@$(BIN)/pytest -m "not slow and not gpu" -n 2 --dist loadfile; status=$$?; $(FRESHNESS) || status=1; exit $$status

test: setup browser-deps  ## everything CI runs: the fast lane, then notebooks (smoke), compilers, the site, a browser
	$(BIN)/pytest -m "not slow and not gpu" -n 2 --dist loadfile
	$(BIN)/pytest -m "slow and serial and not gpu"
	$(BIN)/pytest -m "slow and not serial and not gpu" -n 2 --dist loadfile
	@$(FRESHNESS)

# A GPU machine may bring its own CUDA build of torch: `make gpu-run GPU_PYTHON=python3` uses it as is.
GPU_PYTHON ?= $(BIN)/python
# STALE=1 runs only the labs whose results are not fresh, most quoted first, inside BUDGET_S seconds (1500).
gpu-run: $(if $(filter $(BIN)/python,$(GPU_PYTHON)),setup)  ## on a GPU machine: run every lab (STALE=1: the stale ones) at full size, refresh results/
	$(GPU_PYTHON) -m kb.gpu_run $(NOTEBOOKS) $(if $(OUT_DIR),--out $(OUT_DIR)) $(if $(STALE),--stale) \
	  $(if $(BUDGET_S),--budget-s $(BUDGET_S))

publish-check: setup  ## before publishing: fail if a page would show a stale, legacy or missing GPU number
	$(BIN)/python -m kb.freshness --publish-check

# For a GPU machine that gets a copy of the tree without .git: run there with
# KB_COMMIT=<the printed commit> KB_MANIFEST=<the copied manifest> make gpu-run
gpu-manifest: setup  ## write .device/manifest.txt (git ls-files -s at HEAD) and print the commit; needs a clean tree
	$(BIN)/python -m kb.manifest

# The scaffolder's variables reach it through the environment as typed ($(value ...), no shell, no
# make expansion); unexport keeps make from expanding the originals into every recipe's environment.
unexport SECTION SLUG TITLE TITLE_EN LAB
new-question: export KB_SECTION := $(value SECTION)
new-question: export KB_SLUG := $(value SLUG)
new-question: export KB_TITLE := $(value TITLE)
new-question: export KB_TITLE_EN := $(value TITLE_EN)
new-question: export KB_LAB := $(value LAB)
new-question: setup  ## scaffold a question page: SECTION=kernels SLUG=my-question [TITLE="…？" TITLE_EN="…?"] [LAB=1]
	$(BIN)/python -m kb.new_question --from-env

clean:  ## remove the built site and caches
	rm -rf site .cache test-artifacts
