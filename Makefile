# mxrt: build, run the C examples, test, install.
#   make run      build the library and header, compile the C examples, run them
#   make test     Rust tests, Python tests (pytest, both libraries), header check, C examples
#                 (-Werror), install + pkg-config check, the layering check
#   make check-layers  arrows between src/ modules against docs/architecture.md's allowed list
#   make install PREFIX=/usr/local DESTDIR=   library with SONAME links, header, mxrt.pc
#   make wheel    a pip-installable wheel (build/wheel/dist/mxrt-*.whl; docs/wheel.md)
#   make test-wheel  builds the wheel, installs it into a fresh venv and checks it from there
#   make bench    compare with MXNet 1.9.1's libmxnet.so (installs the wheel into .venv-mxnet; the
#                 distributed KVStore against its ps-lite store and a bare MPI allreduce) and,
#                 on the engine workloads, with OpenMP tasks (libgomp, libomp) and StarPU
#                 (installs clang, libomp-dev, libstarpu-dev when missing; see bench/README.md)
#   make bench-floor  line-transfer latency and the engine's own per-op costs on this machine
#   make miri     the unit tests of every module that runs without foreign code, under Miri
#                 (nightly; not in make test; docs/testing.md#miri)
#   FEATURES=     build without the distributed kvstore (default FEATURES=dist: needs MPI, which
#                 scripts/setup-mpi.sh installs from Debian's packages when missing)

CARGO ?= cargo
CC ?= cc
PREFIX ?= /usr/local
LIBDIR ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
BINDIR ?= $(PREFIX)/bin
DESTDIR ?=

VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n1)
MAJOR := $(firstword $(subst ., ,$(VERSION)))
TARGET := target/release
LIB := $(TARGET)/libmxrt.so
BUILD := build
EXAMPLE_CFLAGS := -std=c11 -Wall -Wextra -Werror -O1 -g -pthread
EXAMPLE_SRCS := $(wildcard c_examples/*.c)
EXAMPLES := $(patsubst c_examples/%.c,$(BUILD)/examples/%,$(EXAMPLE_SRCS))

MXNET_VENV ?= .venv-mxnet
# cargo features of the library: `dist` is the distributed kvstore over MPI
FEATURES ?= dist
CARGO_FEATURES := $(if $(strip $(FEATURES)),--features $(FEATURES),)
WITH_DIST := $(findstring dist,$(FEATURES))
# make test's stress sizes: the 1 M-op engine workload on every engine config and a 60 s soak
# (make soak runs everything bigger)
TEST_SIZES ?= MXRT_STRESS_OPS=1000000 MXRT_SOAK_SECS=60

.PHONY: mxnet-graph-tests wheel test-wheel check-layers mpi-deps dist-test gpu-test gpu-test-real ptx check-ptx miri loom profile-demo python-demo python-test all lib run test rust-test check-header check-abi mxnet-venv examples run-examples test-install install uninstall bench bench-floor clean mxnet-io-tests

all: lib

# MPI and libclang for the dist feature (installed from Debian's packages when missing)
mpi-deps:
	@$(if $(WITH_DIST),bash scripts/setup-mpi.sh,true)

lib: mpi-deps
	$(CARGO) build --release $(CARGO_FEATURES)
	@ln -sf libmxrt.so $(TARGET)/libmxrt.so.$(MAJOR)

$(BUILD)/examples/%: c_examples/%.c c_examples/common.h include/mxrt.h | lib
	@mkdir -p $(dir $@)
	$(CC) $(EXAMPLE_CFLAGS) -Iinclude $< -o $@ -L$(TARGET) -Wl,-rpath,$(abspath $(TARGET)) -lmxrt -lm

examples: lib $(EXAMPLES)

# The model c_examples/predict.c runs and MXNet's own outputs for it: examples/predict_model.py
# in the reference venv, on MXNet's libmxnet.so (MXNET_LIBRARY_PATH unset)
$(BUILD)/predict_model/expected.nd: examples/predict_model.py | mxnet-venv
	@mkdir -p $(dir $@)
	env -u MXNET_LIBRARY_PATH $(MXNET_VENV)/bin/python examples/predict_model.py $(dir $@)

# kvstore_dist runs as a job of 1 server and 2 workers under tools/mxrt-launch
run-examples: examples $(BUILD)/predict_model/expected.nd
	@set -e; cd $(BUILD); for e in $(EXAMPLES:$(BUILD)/%=%); do \
	  case $$e in \
	    examples/kvstore_dist) \
	      if [ -n "$(WITH_DIST)" ]; then \
	        echo "==> ../tools/mxrt-launch -n 2 -s 1 $$e"; ../tools/mxrt-launch -n 2 -s 1 ./$$e; \
	      else echo "==> $$e: skipped (built without the dist feature)"; fi ;; \
	    *) echo "==> $$e"; ./$$e ;; \
	  esac; echo; done

# MXNet's unmodified Python package on libmxrt (examples/python_demo.py, in the reference venv)
python-demo: lib mxnet-venv
	@echo "==> examples/python_demo.py (MXNet's Python package on libmxrt)"
	@MXNET_LIBRARY_PATH=$(abspath $(TARGET))/libmxrt.so $(MXNET_VENV)/bin/python examples/python_demo.py

run: run-examples python-demo

# Every `crate::` path between src/ modules against the allowed arrows in docs/architecture.md
# (Layers), and no cycle (scripts/check-layers.py, python3 only; --self-test checks the checker)
check-layers:
	@python3 scripts/check-layers.py --self-test

check-header: lib
	@git diff --exit-code --stat -- include/mxrt.h || \
	  { echo "include/mxrt.h changed when regenerated: commit the new header"; exit 1; }
	@echo "include/mxrt.h matches the sources"

# MXNet 1.9.1's wheel (python venv): the reference for the interop and header checks
mxnet-venv:
	@MXNET_VENV=$(MXNET_VENV) bash scripts/setup-mxnet.sh >/dev/null

rust-test: mxnet-venv lib
	MXRT_MXNET_PYTHON=$(abspath $(MXNET_VENV))/bin/python $(TEST_SIZES) $(CARGO) test --profile test-fast $(CARGO_FEATURES)
	$(CARGO) test --profile test-fast --no-default-features --test format_mutation --test io_mutation
	$(CARGO) test --profile test-fast --no-default-features --test graph_mutation

# MXNet 1.9.1's own tests of symbolic execution (from a checkout of apache/mxnet at 1.9.1 in
# MXNET_SRC) on libmxrt and on libmxnet.so, each test's outcome listed (not part of make test)
MXNET_SRC ?= /tmp/mx
MXNET_GRAPH_TESTS ?= test_symbol test_executor test_infer_shape test_infer_type \
  test_model_parallel test_multi_device_exec test_module \
  "test_gluon:hybrid or export or symbolblock or deferred or infer or summary"
mxnet-graph-tests: mxnet-venv lib
	MXRT_LIB=$(abspath $(LIB)) bash scripts/mxnet-conformance.sh $(MXNET_SRC) $(MXNET_GRAPH_TESTS)

# MXNet's unmodified Python package on libmxrt and on libmxnet.so, compared (tests/python, pytest)
python-test: mxnet-venv lib
	MXRT_LIB=$(abspath $(LIB)) $(MXNET_VENV)/bin/python -m pytest -q tests/python

# Miri (nightly toolchain with the miri component; not part of make test; about a quarter of an
# hour on 2 idle cores, an hour on busy ones): the unit tests under the interpreter, which reports undefined behaviour
# (aliasing, bounds, provenance, data races, use after free). One filter per module that runs:
# the engine, storage, the C API (handle table, completion slots, updaters), the operators (the
# kernels, and operator/tests.rs: every op family's pointer loops on small arrays, outputs
# aliasing inputs, mutated inputs, staged outputs, sparse fallbacks), ndarray, autograd, the
# local kvstore, resources, the profiler, the parallel loops, the GPU module's host paths and
# the small modules. Not run: dist (MPI is a foreign library; the feature is off) and the GPU
# device code (the CUDA driver is foreign: under Miri the probe reports none). Single tests that
# call foreign functions (shm_open, fork, sched_setscheduler), wait on real time or parse the
# 700 KB op table (hours of JSON under the interpreter) are #[cfg_attr(miri, ignore)] with
# their reason. Flags: no mimalloc (a foreign allocator); -Zmiri-disable-isolation lets tests
# read the clock, environment and files; permissive provenance because parking_lot_core casts
# integers to pointers. Three runs:
# - MIRI_JOINED: tests that join every thread they start, so Miri's leak check runs too;
# - the others use the process-wide engine and thread pools, whose workers live until the
#   process exits (as MXNet's do): -Zmiri-ignore-leaks lets them outlive the main thread (it
#   also skips the memory-leak report, which make sanitize's valgrind run covers);
# - MIRI_TREE: tests that start rayon pools of their own, under Tree Borrows: crossbeam-epoch
#   (rayon's deques) turns a list entry's reference into its container's, which Stacked Borrows
#   rejects and Tree Borrows accepts (crossbeam's own Miri runs use Tree Borrows for it); tests
#   the other runs have (resource::parallel) are skipped here.
MIRI_FILTERS ?= engine:: storage:: capi:: operator:: ndarray:: autograd:: kvstore:: resource:: \
  profiler:: parallel:: gpu:: allocator:: clock:: context:: dtype::
MIRI_JOINED ?= engine:: storage:: resource:: profiler:: gpu:: allocator:: clock:: context:: dtype::
MIRI_TREE ?= parallel::
MIRI_RUN = $(CARGO) +nightly miri test --target-dir target/miri --no-default-features --lib --
MIRI_FLAGS = -Zmiri-disable-isolation -Zmiri-permissive-provenance
MIRI_SHARED = $(filter-out $(MIRI_JOINED) $(MIRI_TREE),$(MIRI_FILTERS))
miri:
	@rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal
	@rustup component list --toolchain nightly --installed | grep -q '^miri' || rustup component add miri --toolchain nightly
	$(if $(filter $(MIRI_JOINED),$(MIRI_FILTERS)),MIRIFLAGS="$(MIRI_FLAGS)" \
	  $(MIRI_RUN) $(filter $(MIRI_JOINED),$(MIRI_FILTERS)))
	$(if $(MIRI_SHARED),MIRIFLAGS="$(MIRI_FLAGS) -Zmiri-ignore-leaks" $(MIRI_RUN) $(MIRI_SHARED))
	$(if $(filter $(MIRI_TREE),$(MIRI_FILTERS)),MIRIFLAGS="$(MIRI_FLAGS) -Zmiri-ignore-leaks \
	  -Zmiri-tree-borrows" $(MIRI_RUN) $(filter $(MIRI_TREE),$(MIRI_FILTERS)) \
	  $(addprefix --skip ,$(filter-out $(MIRI_TREE),$(MIRI_FILTERS))))

# Model checks (loom): the variables' queues with the engine's grant counting, every interleaving
# of two pushing threads (src/engine/var_queue.rs), the worker pools' ready ring
# (src/engine/ring.rs), and how idle workers park and pushes wake them (src/engine/idle/sleep.rs).
# Own target dir: --cfg loom.
loom:
	RUSTFLAGS="--cfg loom" $(CARGO) test --profile test-fast --target-dir target/loom --lib loom_

check-abi: lib mxnet-venv
	@MXNET_VENV=$(MXNET_VENV) bash scripts/check-abi.sh

# MXNet 1.9.1's own data-loading tests on libmxrt and on libmxnet.so, each test's outcome listed
# side by side (scripts/mxnet-conformance.sh). Not part of make test: it needs a checkout of
# MXNet 1.9.1 (MXNET_SRC, with tests/python/unittest and tests/python/common). Tests that
# download data sets fail on both libraries where the network is unreachable.
MXNET_SRC ?= /tmp/mx
MXNET_IO_TESTS ?= test_io test_recordio test_image test_gluon_data test_gluon_data_vision
mxnet-io-tests: lib mxnet-venv
	MXNET_VENV=$(MXNET_VENV) MXRT_LIB=$(abspath $(LIB)) bash scripts/mxnet-conformance.sh \
	  $(MXNET_SRC) $(MXNET_IO_TESTS)

# The distributed kvstore's MPI jobs (tests/dist/run.sh): C jobs, MXNet's Python package with the
# optimizer on the servers, and the failure cases (a killed worker or server, a panic, uneven
# iterations, processes leaving through exit() from C and Python), each bounded in time
dist-test: lib mxnet-venv
ifneq ($(WITH_DIST),)
	$(CARGO) build --profile test-fast $(CARGO_FEATURES) --example dist_fault
	MXRT_LIB_DIR=$(abspath $(TARGET)) PYTHON=$(abspath $(MXNET_VENV))/bin/python \
	  FAULT_BIN=$(abspath target/test-fast/examples/dist_fault) bash tests/dist/run.sh
else
	@echo "dist-test: skipped (built without the dist feature)"
endif

# The GPU suite against the fake CUDA driver (tests/gpu/run.sh builds it as libcuda.so.1), also
# run against a build that does not wait for its GPU work, which must fail it
DROP_SYNC_DIR = target/test-fast
gpu-test: lib mxnet-venv
	$(CARGO) build --profile test-fast $(CARGO_FEATURES) --features test-drop-stream-sync --lib
	@ln -sf libmxrt.so $(DROP_SYNC_DIR)/libmxrt.so.$(MAJOR)
	MXRT_LIB_DIR=$(abspath $(TARGET)) PYTHON=$(abspath $(MXNET_VENV))/bin/python \
	  DROP_SYNC_LIB_DIR=$(abspath $(DROP_SYNC_DIR)) bash tests/gpu/run.sh

# The GPU suite's C checks and bench/gpu_ops.c against the machine's real CUDA driver (needs an
# NVIDIA GPU; not part of make test)
gpu-test-real: lib
	MXRT_GPU_REAL=1 MXRT_LIB_DIR=$(abspath $(TARGET)) BUILD=$(BUILD) bash tests/gpu/run.sh

# The GPU kernels' PTX (src/gpu/kernels/kernels.cu -> kernels.ptx, committed; clang-14)
ptx:
	@bash scripts/ptx.sh
check-ptx:
	@bash scripts/ptx.sh check

test: check-layers rust-test python-test dist-test gpu-test loom check-header check-ptx run-examples $(BUILD)/engine_floor test-install test-wheel check-abi sanitize
	@echo "make test: all passed"

test-install: lib
	@sh scripts/test-install.sh

# the wheel holds the MPI build `lib` makes and a build without MPI (target/nompi)
wheel: lib
	@$(if $(WITH_DIST),bash scripts/build-wheel.sh,echo "make wheel needs FEATURES=dist (the wheel holds the MPI build)"; exit 1)

test-wheel: lib
	@$(if $(WITH_DIST),bash tests/wheel/run.sh,echo "test-wheel: skipped (FEATURES has no dist)")

install: lib
	install -d $(DESTDIR)$(LIBDIR)/pkgconfig $(DESTDIR)$(INCLUDEDIR) $(DESTDIR)$(BINDIR)
	install -m 755 tools/mxrt-launch $(DESTDIR)$(BINDIR)/mxrt-launch
	install -m 755 $(LIB) $(DESTDIR)$(LIBDIR)/libmxrt.so.$(VERSION)
	ln -sf libmxrt.so.$(VERSION) $(DESTDIR)$(LIBDIR)/libmxrt.so.$(MAJOR)
	ln -sf libmxrt.so.$(MAJOR) $(DESTDIR)$(LIBDIR)/libmxrt.so
	install -m 644 $(TARGET)/libmxrt.a $(DESTDIR)$(LIBDIR)/libmxrt.a
	install -m 644 include/mxrt.h $(DESTDIR)$(INCLUDEDIR)/mxrt.h
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@LIBDIR@|$(LIBDIR)|' -e 's|@INCLUDEDIR@|$(INCLUDEDIR)|' \
	    -e 's|@VERSION@|$(VERSION)|' -e 's|@MPI_LIBS@|$(if $(WITH_DIST),-lmpi,)|' mxrt.pc.in > $(DESTDIR)$(LIBDIR)/pkgconfig/mxrt.pc

uninstall:
	rm -f $(DESTDIR)$(LIBDIR)/libmxrt.so $(DESTDIR)$(LIBDIR)/libmxrt.so.$(MAJOR) \
	      $(DESTDIR)$(LIBDIR)/libmxrt.so.$(VERSION) $(DESTDIR)$(LIBDIR)/libmxrt.a \
	      $(DESTDIR)$(INCLUDEDIR)/mxrt.h $(DESTDIR)$(LIBDIR)/pkgconfig/mxrt.pc \
	      $(DESTDIR)$(BINDIR)/mxrt-launch

# Profiles c_examples/profile_demo.c (2 CPU workers): writes build/profile_demo.json (Chrome trace)
# and build/profile_demo.html (timeline picture), and prints the aggregate statistics.
profile-demo: $(BUILD)/examples/profile_demo
	cd $(BUILD) && MXNET_CPU_WORKER_NTHREADS=2 ./examples/profile_demo profile_demo.json
	@ls -l $(BUILD)/profile_demo.json $(BUILD)/profile_demo.html

bench: lib
	MXBENCH_REPEATS=$${MXBENCH_REPEATS:-5} bash bench/run.sh all
	@$(if $(WITH_DIST),MXBENCH_REPEATS=$${MXBENCH_REPEATS:-5} bash bench/dist.sh,echo "bench: the distributed KVStore needs the dist feature")
	MXBENCH_REPEATS=$${MXBENCH_REPEATS:-5} bash bench/gpu_completion.sh

$(BUILD)/engine_floor: bench/engine_floor.c include/mxrt.h | lib
	@mkdir -p $(dir $@)
	$(CC) $(EXAMPLE_CFLAGS) -O2 -Iinclude $< -o $@ -L$(TARGET) -Wl,-rpath,$(abspath $(TARGET)) -lmxrt

bench-floor: $(BUILD)/engine_floor
	@for n in 1 2; do MXNET_CPU_WORKER_NTHREADS=$$n $(BUILD)/engine_floor || exit 1; done

clean:
	$(CARGO) clean
	rm -rf $(BUILD)

# ---- Robustness: sanitizers and soak runs ---------------------------------------------------
#   make sanitize        the C examples under AddressSanitizer + UBSan, then valgrind memcheck with
#                        leak checking, against libmxrt built without mimalloc (part of make test)
#   make sanitize-tsan   optional (nightly job): ThreadSanitizer with the library and std fully
#                        instrumented; needs `rustup toolchain install nightly --component rust-src`
#   make soak            the long runs: 1 M-op engine stress per engine config, a 60 s NDArray +
#                        KVStore soak from 4 threads, 10 x 1 M fuzzer steps, 2 M ops with faults
#                        (make test runs the same tests at bounded sizes)
.PHONY: sanitize sanitize-tsan soak

sanitize: mxnet-venv
	MXNET_VENV=$(MXNET_VENV) bash scripts/sanitize.sh

sanitize-tsan:
	bash scripts/sanitize.sh tsan

SOAK_ENV ?= MXRT_STRESS_OPS=1000000 MXRT_SOAK_SECS=60 MXRT_FUZZ_STEPS=1000000 MXRT_FUZZ_SEEDS=10 \
	MXRT_FAULT_OPS=2000000

soak:
	$(SOAK_ENV) $(CARGO) test --release --test stress --test faults --test abi_fuzz -- --nocapture --test-threads 1
