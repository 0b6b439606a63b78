# Entry points for a fresh machine: `make demo` (the main job) and `make test`.
BUILD_DIR ?= build
JOBS ?= $(shell nproc)
# The NVRTC 12 that scripts/bootstrap.sh installs into .venv (the last NVRTC that targets compute_70),
# handed to the library at run time like any folder of NVRTC; nothing of it is compiled in. Looked up
# when a recipe runs, not when make reads this file: on a fresh machine the .venv is made by the
# bootstrap of the same make run.
VENV_NVRTC = root="$(CURDIR)" && . "$(CURDIR)/scripts/venv_nvrtc.sh" &&

.PHONY: all bootstrap build demo test test-slow test-vllm test-1cat wheel wheel-check clean

all: build

bootstrap:
	@scripts/bootstrap.sh

BUILD_COMMAND = cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null && cmake --build $(BUILD_DIR) -j $(JOBS)

build: bootstrap
	@$(BUILD_COMMAND)

demo: build
	@$(VENV_NVRTC) $(BUILD_DIR)/volt8 demo

# One timing line per phase (scripts/timed_phases.sh); .ci/run checks that each phase printed one.
test:
	@scripts/timed_phases.sh \
	  build 'scripts/bootstrap.sh && $(BUILD_COMMAND)' \
	  cpu 'cd $(BUILD_DIR) && VOLT8_COMPILE_VARIANT_STRIDE=8 ctest --output-on-failure -L cpu -j $(JOBS)' \
	  asan 'JOBS=$(JOBS) scripts/sanitized_tests.sh' \
	  tsan 'JOBS=$(JOBS) scripts/tsan_tests.sh' \
	  pytest '$(VENV_NVRTC) VOLT8_LIBRARY=$(abspath $(BUILD_DIR))/libvolt8.so.0 .venv/bin/python3 -m pytest -q -p no:cacheprovider bindings/python/tests tests/scripts'

# What make test leaves out for time (CI runs it after make test): every kernel variant compiled, not
# every 8th, the V100 resource check of every variant the shipped sm_70 tables use, and the wheel
# check (build the manylinux wheel, install it into a clean venv, run it).
test-slow: build
	@scripts/timed_phases.sh \
	  slow 'cd $(BUILD_DIR) && VOLT8_COMPILE_VARIANT_STRIDE=1 ctest --output-on-failure -L slow -j $(JOBS)' \
	  wheel 'scripts/wheel_check.sh'

# The vLLM plugin inside the pinned vLLM (opt-in: vLLM is a 9 GB install, made once in .venv-vllm;
# VLLM_VENV=DIR uses a venv that has it already). CPU only; scripts/vllm_tests.sh says what it does.
test-vllm: bootstrap
	@scripts/vllm_tests.sh

# The vLLM plugin inside 1Cat-vLLM, the fork V100 fleets run (opt-in: SRC=DIR, a checkout of it; its pinned
# torch and the fork, installed without kernels, go once into .venv-1cat, or ONECAT_VENV=DIR). CPU only;
# scripts/onecat_tests.sh says what it does.
test-1cat: bootstrap
	@SRC="$(SRC)" scripts/onecat_tests.sh

# The manylinux wheel, into dist/ (`pip install dist/volt8-*.whl`).
wheel: bootstrap
	@.venv/bin/python3 -m pip wheel --no-deps --disable-pip-version-check . -w dist

wheel-check: bootstrap
	@scripts/wheel_check.sh

clean:
	rm -rf $(BUILD_DIR) build-asan build-tsan dist
