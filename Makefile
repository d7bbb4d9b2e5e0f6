# Two entry points for a fresh Debian 12 machine (see README):
#   make run    install missing packages, build Release, run the default experiment
#   make test   install missing packages, build, run the whole suite through CTest
BUILD ?= build
JOBS ?= $(shell nproc)
RUN_ARGS ?=

.PHONY: setup configure build run test bench clean

setup:
	@bash scripts/setup.sh

configure: setup
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

run: build
	@$(BUILD)/app/towerbench-run --config samples/configs/default.json $(RUN_ARGS)

test: build
	@cd $(BUILD) && ctest --output-on-failure -j 1

bench: build
	@bash tests/benchmarks/run_all.sh $(BUILD)

clean:
	@rm -rf $(BUILD)
