# Every target creates .venv if missing and installs what it needs first.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.airq-installed
# The locked install: every package at the version CI tested (requirements/lock.py; refresh with `make lock`).
LOCK := requirements/lock.txt
# PyTorch's CPU wheel index. PyPI's torch==2.13.0 for Linux x86 is the CUDA build (several GB of nvidia-* packages);
# the CPU build (2.13.0+cpu) is on this index. TORCH_INDEX= (empty) skips it.
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu

.PHONY: demo test test-stress bench clean study study-quadrotor study-vehicles quarl lock

# torch first, from the CPU index when it answers within 5 s; otherwise from pip's configured index (on an
# ordinary Linux x86 machine that is the CUDA build; a machine whose pip config points at a folder of CPU wheels
# gets the CPU build from there). --no-deps: its dependencies come with the locked install below.
define install_torch
	if [ -n "$(TORCH_INDEX)" ] && $(PY) -c "import urllib.request as u; u.urlopen('$(TORCH_INDEX)/torch/', timeout=5)" 2>/dev/null; then \
	  $(PY) -m pip install -q --no-deps --index-url $(TORCH_INDEX) $(1) 'torch==2.13.0'; \
	else \
	  echo "note: $(TORCH_INDEX) not reachable: torch comes from pip's configured index (the CUDA build on PyPI for Linux x86; README, Install)"; \
	fi
endef

$(STAMP): pyproject.toml $(LOCK)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -c $(LOCK) --upgrade pip
	$(call install_torch,-c $(LOCK))
	# compat mode: the repo root goes on sys.path, so packages added later import without a reinstall
	$(PY) -m pip install -q -c $(LOCK) -e '.[host,dev,airsim,distributed,study,dynamics,mavlink]' --config-settings editable_mode=compat
	# Microsoft's AirSim client too, so the backend is tested against both clients; --no-deps keeps its
	# msgpack-rpc-python from replacing msgpack 1.x (docs/airsim.md)
	$(PY) -m pip install -q -c $(LOCK) setuptools rpc-msgpack
	$(PY) -m pip install -q -c $(LOCK) --no-build-isolation --no-deps airsim==1.8.1
	touch $(STAMP)

# Refresh the lock: upgrade $(VENV) to the newest releases pyproject.toml allows (no lock), then write what is
# installed into $(LOCK). Run `make test` and `make test-arm` before committing it. `make lock VENV=/tmp/lockvenv`
# does it in a fresh venv and leaves .venv alone.
lock:
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip setuptools
	$(call install_torch,--upgrade)
	$(PY) -m pip install -q --upgrade --upgrade-strategy eager -e '.[host,dev,airsim,distributed,study,dynamics,mavlink]' --config-settings editable_mode=compat
	$(PY) -m pip install -q --upgrade rpc-msgpack
	$(PY) -m pip install -q --no-build-isolation --no-deps airsim==1.8.1
	$(PY) requirements/lock.py write
	$(PY) requirements/lock.py check
	touch $(STAMP)

# The main job: Policy I fp32 vs int8 in the closed loop, bridge as a local process with mock hardware.
demo: $(STAMP)
	$(PY) -m hil.run --policy models/policy1_fp32.onnx --policy models/policy1_int8.onnx --sim-only \
		--episodes 100 --level default --seed 0 --out out/demo

# The deployment study (docs/study.md): Policies I-III x fp32/fp16/int8/int8-dynamic in the loop on
# default and hard, bridge pinned like a Pi 3b; 300 seeded episodes per model and level; then the memory stage (an Air
# Learning-sized Policy III fp32 vs int8 under a Pi 3b's 900 MB RAM, with and without swap, and 512 MB; needs root for
# its memory cgroups, skipped otherwise) and the latency stage (every model at its predicted Pi 3b time). Its wall
# time: docs/results.md, "The deployment study".
study: $(STAMP)
	$(PY) -m deployment_study --sim-only --profile pi3b --episodes 300 --levels default hard --seed 0 --out out/study

# The same study on the rigid-body quadrotor (--backend mujoco, docs/dynamics.md) with the quadrotor-trained Policies
# I-III (fp32, fp16, int8; they have no int8-dynamic files), each flying default and hard as the point-mass study's
# do; the memory and latency stages' Air Learning-sized Policy III is the quadrotor's Policy III widened.
QUADROTOR_MODELS := $(foreach n,1 2 3,$(foreach l,_ _hard_,$(foreach p,fp32 fp16 int8,models/policy$(n)_quadrotor$(l)$(p).onnx)))
study-quadrotor: $(STAMP)
	$(PY) -m deployment_study --sim-only --profile pi3b --backend mujoco --models $(QUADROTOR_MODELS) \
		--memory-source models/policy3_quadrotor_fp32.onnx --episodes 300 --levels default hard --seed 0 \
		--out out/study_quadrotor

# Both vehicles' studies side by side in one page (out/study_vehicles/vehicles.html); runs whichever is missing.
# AUTOPILOT_TABLES="DIR ..." adds the ladder from finished autopilot tables (python -m deployment_study.autopilot_table).
study-vehicles: $(STAMP)
	@[ -f out/study/study.json ] || $(MAKE) study
	@[ -f out/study_quadrotor/study.json ] || $(MAKE) study-quadrotor
	$(PY) -m deployment_study.vehicles out/study out/study_quadrotor --out out/study_vehicles \
		$(if $(AUTOPILOT_TABLES),--autopilot-tables $(AUTOPILOT_TABLES))

# The QuaRL study's CPU part (docs/quarl.md): classic control + MinAtar, every (task, algorithm, seed) a
# Ray Tune trial (its wall time: docs/results.md, "The QuaRL study"); rerunning resumes. Then its Table 2,
# figures and reading.
quarl: $(STAMP)
	$(PY) -m quarl run configs/quarl/cpu.toml --out out/quarl/cpu
	$(PY) -m quarl report out/quarl/cpu

# The lint, format and type gate first (pyproject.toml: [tool.ruff], [tool.mypy]), then every test, on two
# pytest-xdist workers (tests/conftest.py: which tests share a worker, which go first), slowest 25 listed.
test: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy
	$(PY) -m pytest -q -n 2 --dist loadgroup --durations=25

# The whole of `make test` with every core busy: stress-ng (Debian's package, installed here as .ci/run installs
# its others) runs one CPU hog per core, at the tests' own priority, for as long as the suite takes. A Raspberry
# Pi flying a policy shares its CPU too; the suite must be green like this (docs/reliability.md, "Under load").
test-stress: $(STAMP)
	@command -v stress-ng >/dev/null || \
	  { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q stress-ng; } || \
	  { echo "make test-stress: needs stress-ng: run (as root) apt-get install -y stress-ng" >&2; exit 1; }
	stress-ng --cpu $$(nproc) --cpu-method loop --timeout 0 --quiet & hogs=$$!; \
	  trap 'kill $$hogs 2>/dev/null; wait $$hogs 2>/dev/null' EXIT; \
	  $(MAKE) --no-print-directory test

bench: $(STAMP)
	$(PY) -m nav_env.bench
	$(PY) -m firmware_bridge.bench
	$(PY) -m hil.bench

clean:
	rm -rf $(VENV) out .pytest_cache

# The bridge as aarch64 code under qemu (Cortex-A72) against the native bridge: tests/arm. device_emulation.arm builds
# the arm64 root filesystem + wheels once into .cache/arm (needs root for debootstrap, ~1 min of downloads).
.PHONY: test-arm
test-arm: $(STAMP)
	@command -v qemu-aarch64-static >/dev/null && { command -v debootstrap || test -x /usr/sbin/debootstrap; } >/dev/null || \
	  { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q qemu-user-static debootstrap; } || \
	  { echo "make test-arm: needs qemu-user-static and debootstrap: run (as root) apt-get install -y qemu-user-static debootstrap" >&2; exit 1; }
	$(PY) -m device_emulation.arm prepare
	AIRQ_TEST_ARM=1 $(PY) -m pytest -q tests/arm
