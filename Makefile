# Entry points for a fresh machine: `make demo` (the main job) and `make test`.
BUILD_DIR ?= build
JOBS ?= $(shell nproc)

.PHONY: all bootstrap build demo test clean

all: build

bootstrap:
	@scripts/bootstrap.sh

build: bootstrap
	@cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	@cmake --build $(BUILD_DIR) -j $(JOBS)

demo: build
	@$(BUILD_DIR)/volt8 demo

test: build
	@cd $(BUILD_DIR) && ctest --output-on-failure -L cpu -j $(JOBS)
	@JOBS=$(JOBS) scripts/sanitized_tests.sh
	@JOBS=$(JOBS) scripts/tsan_tests.sh
	@VOLT8_LIBRARY=$(abspath $(BUILD_DIR))/libvolt8.so.0 .venv/bin/python3 -m pytest -q -p no:cacheprovider bindings/python/tests tests/scripts

clean:
	rm -rf $(BUILD_DIR) build-asan build-tsan
