# Every target creates .venv if missing and installs what it needs first.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.airq-installed

.PHONY: demo test bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch is pinned to 2.13.0 (CPU build); the pin in pyproject keeps pip from pulling CUDA wheels.
	# compat mode: the repo root goes on sys.path, so packages added later import without a reinstall
	$(PY) -m pip install -q -e '.[host,dev]' --config-settings editable_mode=compat
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m nav_env.demo --level default --episodes 4 --seed 0 --out out/demo

test: $(STAMP)
	$(PY) -m pytest -q

bench: $(STAMP)
	$(PY) -m nav_env.bench
	$(PY) -m firmware_bridge.bench
	$(PY) -m hil.bench

clean:
	rm -rf $(VENV) out .pytest_cache
