# Two entry points for a fresh Debian 12 machine (see README):
#   make run    install missing packages, build Release, run the default experiment
#   make test   install missing packages, build, run the whole suite through CTest
#   make tsan   the tower engine's tests under ThreadSanitizer (CI runs it after make test)
BUILD ?= build
JOBS ?= $(shell nproc)
RUN_ARGS ?=

.PHONY: setup configure build run test tsan bench clean

setup:
	@bash scripts/setup.sh

configure: setup
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

# Opens the window on the default experiment and starts it; without a display it says so and
# runs the same experiment headless.
run: build
	@$(BUILD)/app/towerbench --config samples/configs/default.json --start $(RUN_ARGS)

test: build
	@cd $(BUILD) && ctest --output-on-failure -j 1

# The tower engine's tests under ThreadSanitizer (a separate build: sanitizers change every object).
tsan: setup
	@cmake -S . -B $(BUILD)-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTB_SANITIZE_THREAD=ON -DTB_WITH_CUDA=OFF > /dev/null
	@cmake --build $(BUILD)-tsan -j $(JOBS) --target tst_parallel
	@cd $(BUILD)-tsan && TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$(CURDIR)/tests/tsan.supp" ./tests/tst_parallel
	@cd $(BUILD)-tsan && TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$(CURDIR)/tests/tsan.supp" ./tests/tst_parallel --copies

bench: build
	@bash tests/benchmarks/run_all.sh $(BUILD)

clean:
	@rm -rf $(BUILD)
