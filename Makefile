# Every target creates .venv if missing and installs what it needs first.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.airq-installed

.PHONY: demo test bench clean study

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch is pinned to 2.13.0 (CPU build); the pin in pyproject keeps pip from pulling CUDA wheels.
	# compat mode: the repo root goes on sys.path, so packages added later import without a reinstall
	$(PY) -m pip install -q -e '.[host,dev,airsim]' --config-settings editable_mode=compat
	# Microsoft's AirSim client too, so the backend is tested against both clients; --no-deps keeps its
	# msgpack-rpc-python from replacing msgpack 1.x (docs/airsim.md)
	$(PY) -m pip install -q setuptools rpc-msgpack
	$(PY) -m pip install -q --no-build-isolation --no-deps airsim==1.8.1
	touch $(STAMP)

# The main job: Policy I fp32 vs int8 in the closed loop, bridge as a local process with mock hardware.
demo: $(STAMP)
	$(PY) -m hil.run --policy models/policy1_fp32.onnx --policy models/policy1_int8.onnx --sim-only \
		--episodes 100 --level default --seed 0 --out out/demo

# The deployment study (issue #9, docs/study.md): Policies I-III x fp32/fp16/int8/int8-dynamic in the loop on
# default and hard, bridge pinned like a Pi 3b; 400 seeded episodes per model and level; then the memory stage (an Air
# Learning-sized Policy III fp32 vs int8 under a Pi 3b's 900 MB RAM, with and without swap, and 512 MB; needs root for
# its memory cgroups, skipped otherwise). 12.6 min on the 2-core VM at load average 2 (docs/study.md), about 20 min busier.
study: $(STAMP)
	$(PY) -m hil.study --sim-only --profile pi3b --episodes 400 --levels default hard --seed 0 --out out/study

test: $(STAMP)
	$(PY) -m pytest -q

bench: $(STAMP)
	$(PY) -m nav_env.bench
	$(PY) -m firmware_bridge.bench
	$(PY) -m hil.bench

clean:
	rm -rf $(VENV) out .pytest_cache

# The bridge as aarch64 code under qemu (Cortex-A72) against the native bridge: tests/arm. hil.arm builds
# the arm64 root filesystem + wheels once into .cache/arm (needs root for debootstrap, ~1 min of downloads).
.PHONY: test-arm
test-arm: $(STAMP)
	@command -v qemu-aarch64-static >/dev/null && { command -v debootstrap || test -x /usr/sbin/debootstrap; } >/dev/null || \
	  { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q qemu-user-static debootstrap; } || \
	  { echo "make test-arm: needs qemu-user-static and debootstrap: run (as root) apt-get install -y qemu-user-static debootstrap" >&2; exit 1; }
	$(PY) -m hil.arm prepare
	AIRQ_TEST_ARM=1 $(PY) -m pytest -q tests/arm
