# Two commands on a fresh machine: `make demo` (RL on the CPU with the built-in tiny model) and `make test`.
# Both create .venv with pip when it is missing and install every package under packages/ into it.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.relight-installed
PACKAGES := $(sort $(wildcard packages/*))
OUT ?= runs/demo-$(shell date +%Y%m%d-%H%M%S)

.PHONY: install test lint demo clean

$(STAMP): constraints.txt requirements-dev.txt $(wildcard packages/*/pyproject.toml)
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch first, pinned, so pip takes the CPU build instead of pulling a CUDA one.
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -c constraints.txt -r requirements-dev.txt $(foreach p,$(PACKAGES),-e $(p))
	touch $(STAMP)

install: $(STAMP)

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/pyright

test: lint
	$(VENV)/bin/pytest

demo: $(STAMP)
	$(PY) -m relight_torch.demo --out $(OUT)

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
