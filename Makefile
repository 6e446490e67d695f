# dqn — GNU Makefile. `make` builds libdqn (static + shared), build/dqn and the tests;
# `make test` runs every test (also under ASan/UBSan); `make install PREFIX=...`.
# Options: BLAS=auto|openblas|builtin  CUDA=auto|0|1  SAN=0|1  BUILD=dir  CUDA_ARCH=sm_90
#          NCCL_HOME=dir (include/nccl.h, lib/libnccl.so; default CUDA_HOME)
PREFIX   ?= /usr/local
BUILD    ?= build
BLAS     ?= auto
CUDA     ?= auto
SAN      ?= 0
CUDA_ARCH ?= sm_90
CC       ?= cc
NVCC     ?= nvcc
CUDA_HOME ?= /usr/local/cuda
NCCL_HOME ?= $(CUDA_HOME)
# The version, defined once: include/dqn.h's DQN_VERSION (dqn.pc takes it from here)
VERSION  := $(shell sed -n 's/.*define DQN_VERSION "\(.*\)".*/\1/p' include/dqn.h)

CFLAGS_BASE := -std=c11 -O2 -g -Wall -Wextra -Werror -fPIC -D_POSIX_C_SOURCE=200809L \
               -Iinclude -Isrc
ifeq ($(SAN),1)
  CFLAGS_BASE += -O1 -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all
  LDSAN := -fsanitize=address,undefined
  CUDA := 0
endif
CFLAGS ?=
CFLAGS := $(CFLAGS_BASE) $(CFLAGS)
LDLIBS := -lm -lpthread

# ---- BLAS detection: OpenBLAS (Debian's libopenblas-dev) if present, else the built-in GEMM (an
# OpenBLAS build too takes the built-in one on AVX2/AVX-512 CPUs at one thread: src/backends/cpu/gemm.c)
HASH := \#
HAVE_OPENBLAS := $(shell printf '$(HASH)include <cblas.h>\nint main(void){return 0;}' | \
    $(CC) -x c - -o /dev/null -lopenblas 2>/dev/null && echo 1)
ifeq ($(BLAS),auto)
  BLAS := $(if $(HAVE_OPENBLAS),openblas,builtin)
endif
ifeq ($(BLAS),openblas)
  CFLAGS += -DDQN_HAVE_OPENBLAS=1
  LDLIBS += -lopenblas
endif

# ---- CUDA detection: compile and link the CUDA backend whenever nvcc is there
HAVE_NVCC := $(shell command -v $(NVCC) >/dev/null 2>&1 && echo 1)
ifeq ($(CUDA),auto)
  CUDA := $(if $(HAVE_NVCC),1,0)
endif

SRCS := $(shell find src -name '*.c' -not -path 'src/backends/cuda/*' | sort)
CU_SRCS := $(shell find src/backends/cuda -name '*.cu' 2>/dev/null | sort)
ifeq ($(CUDA),1)
  CFLAGS += -DDQN_HAVE_CUDA=1 -I$(CUDA_HOME)/include
  NVFLAGS := -O3 -arch=$(CUDA_ARCH) -std=c++20 -Iinclude -Isrc -DDQN_HAVE_CUDA=1 \
             -Xcompiler -fPIC,-Wall,-Wextra,-Werror -Werror all-warnings --expt-relaxed-constexpr -MMD -MP
  NVFLAGS += -I$(NCCL_HOME)/include
  # NCCL (data parallelism, docs/multi-gpu.md) lives in lib/, not lib64/, in the CUDA image
  LDLIBS += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -L$(NCCL_HOME)/lib \
            -Wl,-rpath,$(NCCL_HOME)/lib -lnccl -lcublasLt -lcublas -lcudart -lstdc++
  OBJS_CU := $(patsubst src/%.cu,$(BUILD)/obj/%.o,$(CU_SRCS))
  # CUPTI (bench_timeline's kernel records) where the toolkit has its header and library
  CUPTI_H := $(firstword $(wildcard $(CUDA_HOME)/include/cupti.h $(CUDA_HOME)/extras/CUPTI/include/cupti.h))
  CUPTI_SO := $(firstword $(wildcard $(CUDA_HOME)/lib64/libcupti.so $(CUDA_HOME)/extras/CUPTI/lib64/libcupti.so))
  ifneq ($(and $(CUPTI_H),$(CUPTI_SO)),)
    $(BUILD)/bench/bench_timeline: CFLAGS += -DDQN_HAVE_CUPTI=1 -I$(dir $(CUPTI_H))
    $(BUILD)/bench/bench_timeline: LDLIBS += -L$(dir $(CUPTI_SO)) -Wl,-rpath,$(dir $(CUPTI_SO)) -lcupti
  endif
else
  OBJS_CU :=
endif

OBJS := $(patsubst src/%.c,$(BUILD)/obj/%.o,$(SRCS)) $(OBJS_CU)
LIB_OBJS := $(filter-out $(BUILD)/obj/cli/%,$(OBJS))
CLI_OBJS := $(filter $(BUILD)/obj/cli/%,$(OBJS))
TEST_SRCS := $(sort $(wildcard tests/test_*.c))
TESTS := $(patsubst tests/%.c,$(BUILD)/tests/%,$(TEST_SRCS))
BENCH_SRCS := $(sort $(wildcard bench/bench_*.c))
BENCHES := $(patsubst bench/%.c,$(BUILD)/bench/%,$(BENCH_SRCS))
EXAMPLE_SRCS := $(sort $(wildcard examples/*.c))
EXAMPLES := $(patsubst examples/%.c,$(BUILD)/examples/%,$(EXAMPLE_SRCS))

.PHONY: all lib examples lib-and-tests test test-unit test-gpu install clean bench info
all: info $(BUILD)/libdqn.a $(BUILD)/libdqn.so $(BUILD)/dqn $(TESTS) $(BENCHES) $(EXAMPLES)

# Programs that use only the public header, as a user's would (the C env API and trainer)
examples: $(EXAMPLES)

lib: $(BUILD)/libdqn.a $(BUILD)/libdqn.so

info:
	@echo "dqn: GEMM=$(BLAS) CUDA=$(CUDA) SAN=$(SAN) build=$(BUILD)$(if $(CUPTI_SO), CUPTI=1)"

$(BUILD)/obj/%.o: src/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@
# The CPU backend reads no errno from libm; without errno, sqrtf vectorises (same results)
$(BUILD)/obj/backends/cpu/%.o: CFLAGS += -fno-math-errno

$(BUILD)/obj/%.o: src/%.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) -c $< -o $@

$(BUILD)/libdqn.a: $(LIB_OBJS)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/libdqn.so: $(LIB_OBJS)
	$(CC) -shared -o $@ $^ $(LDSAN) $(LDLIBS)

$(BUILD)/dqn: $(CLI_OBJS) $(BUILD)/libdqn.a
	$(CC) $(CFLAGS) -o $@ $(CLI_OBJS) $(BUILD)/libdqn.a $(LDSAN) $(LDLIBS)

$(BUILD)/tests/%: tests/%.c $(BUILD)/libdqn.a $(wildcard tests/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests -o $@ $< $(BUILD)/libdqn.a $(LDSAN) $(LDLIBS)

$(BUILD)/examples/%: examples/%.c $(BUILD)/libdqn.a include/dqn.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(BUILD)/libdqn.a $(LDSAN) $(LDLIBS)

$(BUILD)/bench/%: bench/%.c $(BUILD)/libdqn.a $(wildcard tests/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests -o $@ $< $(BUILD)/libdqn.a $(LDSAN) $(LDLIBS)

# Every test: the normal build, the same unit tests under ASan+UBSan, the Python references.
test: all
	@$(MAKE) --no-print-directory SAN=1 BUILD=$(BUILD)-san CUDA=0 lib-and-tests
	@bash tests/run_tests.sh $(BUILD) $(BUILD)-san

lib-and-tests: $(BUILD)/libdqn.a $(BUILD)/dqn $(TESTS)

# Only the C unit tests of one build (quick loop while developing)
test-unit: all
	@bash tests/run_tests.sh $(BUILD)

test-gpu: all
	@bash tests/run_gpu_tests.sh $(BUILD)

bench: all
	@bash bench/run.sh $(BUILD)

install: $(BUILD)/libdqn.a $(BUILD)/libdqn.so $(BUILD)/dqn
	install -d $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/bin
	install -m 644 $(BUILD)/libdqn.a $(DESTDIR)$(PREFIX)/lib/
	install -m 755 $(BUILD)/libdqn.so $(DESTDIR)$(PREFIX)/lib/
	install -m 644 include/dqn.h $(DESTDIR)$(PREFIX)/include/
	install -m 755 $(BUILD)/dqn $(DESTDIR)$(PREFIX)/bin/
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@VERSION@|$(VERSION)|' -e 's|@LIBS@|$(LDLIBS)|' \
	    dqn.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/dqn.pc

clean:
	rm -rf $(BUILD) $(BUILD)-san

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)

# ---- reliability (docs/reliability.md): crash-safety trials, fuzzing, ThreadSanitizer
# The fuzz harnesses' replay over their corpora (a C test of every build): the harnesses are
# included sources, and the health report's harness links the CLI's objects but main.o.
FUZZ_HARNESSES := $(wildcard tests/fuzz/*.c tests/fuzz/*.h)
FUZZ_CLI_OBJS := $(filter-out $(BUILD)/obj/cli/main.o,$(CLI_OBJS))
$(BUILD)/tests/test_crash_fuzz_corpus: tests/test_crash_fuzz_corpus.c $(FUZZ_HARNESSES) \
		$(FUZZ_CLI_OBJS) $(BUILD)/libdqn.a $(wildcard tests/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests -DDQN_SRC_DIR_DEFAULT='"$(CURDIR)"' -o $@ $< $(FUZZ_CLI_OBJS) \
	    $(BUILD)/libdqn.a $(LDSAN) $(LDLIBS)

.PHONY: test-crash fuzz fuzz-build test-tsan
# Every step of every checkpoint write killed, and 60 random SIGKILLs, each resumed and compared
# bit for bit with the uninterrupted run (tests/test_crash.sh; make test runs 20 trials)
test-crash: $(BUILD)/dqn
	DQN_CLI=$(CURDIR)/$(BUILD)/dqn DQN_CRASH_FULL=1 bash tests/test_crash.sh

# libFuzzer (clang): `make fuzz FUZZ_SECONDS=N` runs each target of tests/fuzz/ for N seconds,
# niced, one at a time; new corpus entries go to build-fuzz/corpus/<target>/, crashes to
# build-fuzz/crashes/<target>/ (fix, then keep the input in tests/fuzz/<target>/crashes/).
FUZZ_SECONDS ?= 60
FUZZ_TARGETS ?= config csv ckpt health_event health_report
FUZZ_CC ?= clang
FUZZ_FLAGS := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
fuzz-build:
	@CFLAGS="-O1 -Wno-pass-failed -fsanitize=fuzzer-no-link $(FUZZ_FLAGS)" $(MAKE) --no-print-directory \
	    BUILD=build-fuzz CC=$(FUZZ_CC) CUDA=0 BLAS=builtin LDSAN="$(FUZZ_FLAGS)" \
	    build-fuzz/libdqn.a $(FUZZ_CLI_OBJS:$(BUILD)/%=build-fuzz/%)
	@mkdir -p build-fuzz/fuzz
	@for t in $(FUZZ_TARGETS); do \
	  objs=; [ $$t = health_report ] && objs="$(FUZZ_CLI_OBJS:$(BUILD)/%=build-fuzz/%)"; \
	  echo "fuzz: build-fuzz/fuzz/fuzz_$$t"; \
	  $(FUZZ_CC) -std=c11 -O1 -g -D_POSIX_C_SOURCE=200809L -Iinclude -Isrc -Itests \
	    -fsanitize=fuzzer $(FUZZ_FLAGS) -o build-fuzz/fuzz/fuzz_$$t tests/fuzz/fuzz_$$t.c \
	    $$objs build-fuzz/libdqn.a -lm -lpthread || exit 1; \
	done

fuzz: fuzz-build
	@failed=; for t in $(FUZZ_TARGETS); do \
	  mkdir -p build-fuzz/corpus/$$t build-fuzz/crashes/$$t build-fuzz/logs; \
	  echo "fuzz: $$t for $(FUZZ_SECONDS) s (log: build-fuzz/logs/$$t.log)"; \
	  nice -n 10 build-fuzz/fuzz/fuzz_$$t -max_total_time=$(FUZZ_SECONDS) -rss_limit_mb=2048 \
	    -timeout=20 -print_final_stats=1 -artifact_prefix=build-fuzz/crashes/$$t/ \
	    build-fuzz/corpus/$$t tests/fuzz/$$t >build-fuzz/logs/$$t.log 2>&1 || failed="$$failed $$t"; \
	  grep -E '^(#[0-9]+.*DONE|stat::|==[0-9]+==ERROR|SUMMARY)' build-fuzz/logs/$$t.log | tail -n 8; \
	done; \
	if [ -n "$$failed" ]; then echo "fuzz: crashes in:$$failed (see build-fuzz/crashes/)"; exit 1; fi

# ThreadSanitizer over the threaded paths: the data-parallel ranks as threads with the in-process
# all-reduce (test_data_parallel), built with the built-in GEMM (an uninstrumented OpenBLAS
# would hide its threads from TSan). TSAN_TESTS=all runs every C test but the learning and GPU
# ones (as the ASan/UBSan run does), TSAN_TESTS="test_a test_b" those. Any report fails it.
TSAN_TESTS ?= test_data_parallel
TSAN_ALL := $(notdir $(filter-out $(BUILD)/tests/test_learn% $(BUILD)/tests/test_gpu%,$(TESTS)))
TSAN_RUN = $(if $(filter all,$(TSAN_TESTS)),$(TSAN_ALL),$(TSAN_TESTS))
test-tsan:
	@CFLAGS="-O1 -fsanitize=thread" $(MAKE) --no-print-directory BUILD=build-tsan CUDA=0 \
	    BLAS=builtin LDSAN=-fsanitize=thread build-tsan/libdqn.a build-tsan/dqn \
	    $(TSAN_RUN:%=build-tsan/tests/%)
	@fail=0; reports=0; \
	for t in $(TSAN_RUN:%=build-tsan/tests/%); do \
	  [ -x $$t ] || continue; log=build-tsan/$$(basename $$t).log; \
	  TSAN_OPTIONS="halt_on_error=0 exitcode=66 second_deadlock_stack=1" DQN_PYTHON=$(CURDIR)/.venv/bin/python \
	    DQN_BUILD=$(CURDIR)/build-tsan DQN_CLI=$(CURDIR)/build-tsan/dqn $$t >$$log 2>&1; rc=$$?; \
	  n=$$(grep -c '^SUMMARY: ThreadSanitizer' $$log); reports=$$((reports + n)); \
	  if { [ $$rc -eq 0 ] || [ $$rc -eq 77 ]; } && [ $$n -eq 0 ]; then \
	    echo "PASS  tsan:$$(basename $$t) (rc $$rc, 0 reports)"; \
	  else echo "FAIL  tsan:$$(basename $$t) (rc $$rc, $$n reports)"; \
	    grep -A24 'WARNING: ThreadSanitizer' $$log | head -n 80; fail=1; fi; \
	done; \
	echo "tsan: $$reports reports"; \
	[ $$fail -eq 0 ]
