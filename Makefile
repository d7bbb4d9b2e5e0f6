# Two entry points for a fresh Debian 12 machine (see README):
#   make run    install missing packages, build Release, run the default experiment
#   make test   install missing packages, build, run the whole suite through CTest
#   make tsan   the tower engine's tests under ThreadSanitizer (CI runs it after make test)
#   make asan   the whole suite under AddressSanitizer + UndefinedBehaviorSanitizer (CI too)
#   make fuzz   every libFuzzer target for FUZZ_SECONDS each (CI: 20; docs/testing.md: "Fuzzing")
#   make faults the fault campaign: FAULT_CASES runs of 2-3 processes killed, stopped or cut at
#               random (FAULT_SEED), each resumed (about 7 min for 60; not in CI: docs/testing.md)
BUILD ?= build
JOBS ?= $(shell nproc)
RUN_ARGS ?=
FUZZ_SECONDS ?= 20
# Unity builds: CMake compiles each library's and program's sources in batches of 8 per compiler
# call, so the Qt, json and protobuf headers are parsed once per batch, not once per file (a clean
# Release build: see docs/measurements.md, "CI stage times"). UNITY=OFF for one file per call, the
# quicker choice while editing a single file.
UNITY ?= ON
# Ninja for a new build folder: it starts a target's compiles before the libraries it links are
# linked, and a build with nothing to do costs 0.1 s where CMake's Makefiles take 6 s; a folder
# configured before keeps the generator it was made with (CMake refuses to switch).
generator = $(if $(wildcard $(1)/CMakeCache.txt),,-G Ninja)

.PHONY: setup configure build run test tsan-build tsan asan-build asan fuzz-build fuzz faults bench clean

setup:
	@bash scripts/setup.sh

configure: setup
	@cmake -S . -B $(BUILD) $(call generator,$(BUILD)) -DCMAKE_BUILD_TYPE=Release -DCMAKE_UNITY_BUILD=$(UNITY)

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

# Opens the window on the default experiment and starts it; without a display it says so and
# runs the same experiment headless.
run: build
	@$(BUILD)/app/towerbench --config samples/configs/default.json --start $(RUN_ARGS)

test: build
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# The tower engine's tests under ThreadSanitizer (a separate build: sanitizers change every object).
# The sanitizer and fuzz builds keep line tables only (-g1, also in CMakeLists.txt): their reports
# name functions, files and lines, and a unity batch compiles in 70% of the time it takes with full
# debug information.
SAN_FLAGS = "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG"
tsan-build: setup
	@cmake -S . -B $(BUILD)-tsan $(call generator,$(BUILD)-tsan) -DCMAKE_BUILD_TYPE=RelWithDebInfo $(SAN_FLAGS) -DTB_SANITIZE_THREAD=ON -DCMAKE_UNITY_BUILD=$(UNITY) -DTB_WITH_CUDA=OFF -DTB_WITH_MPI=OFF > /dev/null
	@cmake --build $(BUILD)-tsan -j $(JOBS) --target tst_parallel

tsan: tsan-build
	@cd $(BUILD)-tsan && TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$(CURDIR)/tests/tsan.supp" ./tests/tst_parallel
	@cd $(BUILD)-tsan && TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$(CURDIR)/tests/tsan.supp" ./tests/tst_parallel --copies

# The whole suite with ASan and UBSan in every object (Qt's and oneDNN's own code is not
# instrumented, only called). Any undefined behaviour or invalid access ends the test that hit it;
# LeakSanitizer reports leaks at each test program's exit (tests/lsan.supp holds no suppression:
# the suite runs clean). Built without MPI: Open MPI's own
# allocations that outlive MPI_Finalize would fill the report; the runs of several processes are
# tested in the Release build (tests/mpi).
ASAN_ENV = ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:strict_string_checks=1 \
	UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp
asan-build: setup
	@cmake -S . -B $(BUILD)-asan $(call generator,$(BUILD)-asan) -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1" \
		-DTB_SANITIZE_ADDRESS=ON -DCMAKE_UNITY_BUILD=$(UNITY) -DTB_WITH_CUDA=OFF -DTB_WITH_MPI=OFF > /dev/null
	@cmake --build $(BUILD)-asan -j $(JOBS)

# The window's screen suite runs at one size: the other runs the same code on a larger screen (its
# layout is checked in the Release build), and under ASan it costs minutes of CI.
asan: asan-build
	@cd $(BUILD)-asan && $(ASAN_ENV) ctest --output-on-failure -j $(JOBS) -E '^tst_ui_screen_1920x1080$$'

# libFuzzer needs clang: a separate build of the Qt-free core with every object instrumented.
fuzz-build: setup
	@cmake -S . -B $(BUILD)-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo $(SAN_FLAGS) -DCMAKE_CXX_COMPILER=clang++-14 -DTB_FUZZ=ON -DCMAKE_UNITY_BUILD=$(UNITY) \
		-DTB_WITH_CUDA=OFF -DTB_WITH_GUI=OFF -DTB_WITH_MPI=OFF > /dev/null
	@cmake --build $(BUILD)-fuzz -j $(JOBS) --target fuzz_targets

fuzz: fuzz-build
	@scripts/fuzz.sh $(BUILD)-fuzz $(FUZZ_SECONDS)

FAULT_SEED ?= 1
FAULT_CASES ?= 60
faults: build
	@python3 tests/faults/campaign.py $(BUILD)/app/towerbench-run --seed $(FAULT_SEED) --cases $(FAULT_CASES) \
		--out $(BUILD)/fault-campaign.json

bench: build
	@bash tests/benchmarks/run_all.sh $(BUILD)

clean:
	@rm -rf $(BUILD)
