# hybrid.c build. `make` builds the CLI (./hybrid); `make test` runs the CPU suite;
# `make train` prepares the default corpus and trains; `make test SANITIZE=1` runs the
# suite under ASan + UBSan; `make lib` builds the ops as shared libraries
# (include/hybrid_ops.h). Everything generated goes under out/.
#
# The CPU reference is compiled twice: as float (the trainer) and as double
# (-DREAL_DOUBLE, for the finite-difference gradient checks in tests/).

CC      ?= gcc
comma   := ,
NVCC    ?= nvcc
OUT     := out
CFLAGS  ?= -O2 -g
CFLAGS  += -std=c11 -Wall -Wextra -fopenmp -D_DEFAULT_SOURCE -I. -MMD -MP
LDLIBS  += -lm -fopenmp -ldl

ifeq ($(SANITIZE),1)
  CFLAGS  += -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
  LDLIBS  += -fsanitize=address,undefined
  BUILD   := $(OUT)/build-san
  BIN     := $(BUILD)/hybrid
else
  BUILD   := $(OUT)/build
  BIN     := hybrid
endif

# ---- optional parts: each one found or turned off with a message ----
# (`make train`, `make test` and `make data` first check the system packages and then run a
# second make, which detects and reports; this one stays quiet)
QUIET := $(if $(MAKECMDGOALS),$(if $(filter-out train test data,$(MAKECMDGOALS)),,1))
say = $(if $(QUIET),,$(info [hybrid] $(1)))
PCRE2_CFLAGS := $(shell pkg-config --cflags libpcre2-8 2>/dev/null)
PCRE2_LIBS   := $(shell pkg-config --libs libpcre2-8 2>/dev/null)
ifneq ($(PCRE2_LIBS),)
  CFLAGS += -DHAVE_PCRE2 $(PCRE2_CFLAGS)
  LDLIBS += $(PCRE2_LIBS)
  $(call say,PCRE2 found: text encoding enabled)
else
  $(call say,PCRE2 not found (Debian: libpcre2-dev): `prepare` and text prompts are disabled)
endif

MPICC_PATH := $(shell command -v mpicc 2>/dev/null)
ifeq ($(NO_MPI),1)
  MPICC_PATH :=
endif
ifneq ($(MPICC_PATH),)
  MPI_CFLAGS := $(shell mpicc --showme:compile 2>/dev/null)
  MPI_LIBS   := $(shell mpicc --showme:link 2>/dev/null)
  CFLAGS += -DHAVE_MPI $(MPI_CFLAGS)
  LDLIBS += $(MPI_LIBS)
  $(call say,MPI found ($(MPICC_PATH)): `mpirun -np N ./hybrid train` runs data/expert parallel)
else
  $(call say,MPI not found (Debian: libopenmpi-dev openmpi-bin): single-process runs only)
endif

NVCC_PATH := $(shell command -v $(NVCC) 2>/dev/null)
ifeq ($(NO_CUDA),1)
  NVCC_PATH :=
endif
ifneq ($(NVCC_PATH),)
  CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC_PATH))
  CUDA_ARCH ?= -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90
  # -fPIC: the kernels' objects also make the CUDA plugin, a shared library (below, at the CLI)
  NVCCFLAGS ?= -O3 -std=c++17 $(CUDA_ARCH) -I. -Xcompiler -Wall,-Wextra,-fopenmp,-fPIC -DHAVE_CUDA -MMD -MP
  # only the float build has CUDA: the double build (tests, hybrid_f64) is the CPU reference
  CUDA_CFLAGS := -DHAVE_CUDA -I$(CUDA_HOME)/include
  CUDA_LIBS   := -L$(CUDA_HOME)/lib64 -lcudart -lcublas -lcublasLt -lstdc++
  CU_SRC := $(wildcard kernels/*.cu kernels/*/*.cu dist/*.cu)
  # NCCL_HOME: an NCCL outside the CUDA toolkit (include/nccl.h, lib/libnccl.so)
  NCCL_INC := $(firstword $(wildcard $(if $(NCCL_HOME),$(NCCL_HOME)/include/nccl.h) $(CUDA_HOME)/include/nccl.h /usr/include/nccl.h))
  ifneq ($(and $(NCCL_INC),$(MPICC_PATH)),)
    NVCCFLAGS += -DHAVE_NCCL $(MPI_CFLAGS) $(if $(NCCL_HOME),-I$(NCCL_HOME)/include)
    CUDA_CFLAGS += -DHAVE_NCCL
    CUDA_LIBS   += $(if $(NCCL_HOME),-L$(NCCL_HOME)/lib -Wl$(comma)-rpath$(comma)$(NCCL_HOME)/lib) -lnccl
    $(call say,NCCL found ($(NCCL_INC)): multi-GPU training under mpirun)
  else
    $(call say,NCCL or MPI not found: one GPU per run)
  endif
  # cuDNN (CUDNN_HOME: one outside the CUDA toolkit): the optional cuDNN attention
  # (HYBRID_ATTN=cudnn; kernels/core/attention_cudnn.cu). The CPU emulator never uses it.
  CUDNN_INC := $(firstword $(wildcard $(if $(CUDNN_HOME),$(CUDNN_HOME)/include/cudnn.h) $(CUDA_HOME)/include/cudnn.h /usr/include/cudnn.h /usr/include/x86_64-linux-gnu/cudnn.h))
  ifeq ($(NO_CUDNN),1)
    CUDNN_INC :=
  endif
  ifneq ($(CUDNN_INC),)
    NVCCFLAGS += -DHAVE_CUDNN $(if $(CUDNN_HOME),-I$(CUDNN_HOME)/include)
    CUDA_CFLAGS += -DHAVE_CUDNN
    CUDA_LIBS   += $(if $(CUDNN_HOME),-L$(CUDNN_HOME)/lib -Wl$(comma)-rpath$(comma)$(CUDNN_HOME)/lib) -lcudnn
    $(call say,cuDNN found ($(CUDNN_INC)): HYBRID_ATTN=cudnn selects its flash attention)
  else
    $(call say,cuDNN not found: HYBRID_ATTN=cudnn falls back to our attention kernels)
  endif
  $(call say,nvcc found at $(NVCC_PATH): CUDA backend built for sm_90 + PTX)
else
  CU_SRC :=
  $(call say,nvcc not found: CPU-only build)
endif

# ---- the flags found above, in a stamp that every object and link under $(BUILD) depends on ----
# Rewritten only when they change (PCRE2, MPI, NCCL or nvcc installed or removed, NO_MPI=1,
# NO_CUDA=1, another CC or CFLAGS): then everything there is rebuilt, no `make clean`.
# (The shared libraries of `make lib` have fixed flags: nothing found here reaches them.)
# the CUDA emulator's C++ flags (its rules are at "the CUDA emulator" below)
# (-fno-strict-aliasing: CUDA code reads bf16 pairs through uint4 and the like, as nvcc allows;
# g++ -O2 would assume those accesses cannot alias and read stale values, e.g. load8's zeros)
# (-fPIC: the emulated backend is also a CUDA plugin, $(EMU)/libhybrid_cuda_emu.so, below)
EMU_CXXFLAGS := -O2 -g -std=c++17 -Wall -Wextra -Wno-unknown-pragmas -fopenmp -D_DEFAULT_SOURCE -U_FORTIFY_SOURCE \
                -fno-strict-aliasing -I. -MMD -MP -DHYBRID_CUDA_EMU -fPIC
FLAGS := $(BUILD)/flags
FLAGS_NOW := $(strip $(CC) $(CFLAGS) $(CUDA_CFLAGS) $(LDLIBS) $(CUDA_LIBS) $(NVCC_PATH) $(NVCCFLAGS) $(CXX) $(EMU_CXXFLAGS))
ifeq ($(QUIET),)
  ifneq ($(file < $(FLAGS)),$(FLAGS_NOW))
    $(if $(wildcard $(FLAGS)),$(call say,the flags differ from the last build's in $(BUILD): rebuilding it))
    $(shell mkdir -p $(BUILD))
    $(file > $(FLAGS),$(FLAGS_NOW))
  endif
endif

# ---- sources ----
LIB_SRC  := $(wildcard base/*.c model/*.c model/ops/*.c model/ops/*/*.c optim/*.c data/*.c checkpoints/*.c dist/*.c) \
            $(filter-out train/main.c train/cuda_plugin.c,$(wildcard train/*.c))
TEST_SRC := $(wildcard tests/test_*.c)
TESTS    := $(patsubst tests/%.c,$(BUILD)/tests/%,$(TEST_SRC))

OBJ_F  := $(patsubst %.c,$(BUILD)/f/%.o,$(LIB_SRC))
OBJ_D  := $(patsubst %.c,$(BUILD)/d/%.o,$(LIB_SRC))
OBJ_CU := $(patsubst %.cu,$(BUILD)/cu/%.o,$(CU_SRC))

# the CUDA emulator's programs (rules below, at "the CUDA emulator"; defined here, before
# test-only names them as prerequisites)
EMU       := $(BUILD)/emu
# the families whose kernels follow the emulator's rules (docs/cuda.md, "The CPU emulator")
EMU_FAMILIES := core norm_glu optim delta_rule attnres mla moe
# + the backend itself (its table, memory and transfers; kernels/timer.cu's CUDA events are the
# GPU's: the emulated programs time with the wall clock)
EMU_CU    := $(foreach f,$(EMU_FAMILIES),$(wildcard kernels/$(f)/*.cu)) kernels/backend_cuda.cu kernels/device.cu
EMU_OBJ   := $(patsubst %.cu,$(EMU)/%.o,$(EMU_CU)) $(EMU)/cuda_emu.o
EMU_TESTS := $(if $(filter 1,$(SANITIZE)),,$(EMU)/test_cuda_emu \
               $(patsubst tests/gpu/%.c,$(EMU)/%,$(foreach f,$(EMU_FAMILIES),$(wildcard tests/gpu/test_$(f)*.c))) \
               $(EMU)/test_model)

# The ops as shared libraries for other programs (include/hybrid_ops.h): float and
# double builds of model/ops/ (every family, the CPU tables) plus the base layer, never sanitized.
LIBOPS_SRC    := $(wildcard model/ops/*.c model/ops/*/*.c) model/backend.c base/util.c base/kill_point.c base/rng.c
LIBOPS_CFLAGS := -O2 -g -std=c11 -Wall -Wextra -fopenmp -D_DEFAULT_SOURCE -I. -MMD -MP -fPIC
LIBOPS        := $(OUT)/lib/libhybrid_ops.so $(OUT)/lib/libhybrid_ops_f64.so

.PHONY: all test test-only test-gpu bench bench-kda bench-kda-ours bench-hybrid bench-moe bench-moe-ours bench-moe-model train train-only data vocab clean help lib
# keep the objects of both builds between test links
.SECONDARY:
all: $(BIN)

# the CLI; the sanitizer build's copy lives in its build folder. With CUDA, the kernels and the
# backend are a plugin that ./hybrid loads for --device cuda only (train/cuda_plugin.h): linking
# the CUDA libraries into ./hybrid cost every start ~0.35 s, CPU commands included. ./hybrid
# exports its symbols (-rdynamic) for the plugin, which binds its own (-Bsymbolic); always, nvcc or
# not: the CUDA emulator's plugin ($(EMU)/libhybrid_cuda_emu.so) needs them too.
CUDA_PLUGIN := $(if $(CU_SRC),$(BUILD)/libhybrid_cuda.so)
$(BIN): $(BUILD)/f/train/main.o $(BUILD)/f/train/cuda_plugin.o $(OBJ_F) $(FLAGS) | $(CUDA_PLUGIN)
	$(CC) $(CFLAGS) -rdynamic -o $@ $(filter %.o,$^) $(LDLIBS)

$(BUILD)/f/train/cuda_plugin.o: CFLAGS += -DHYBRID_CUDA_PLUGIN_PATH='"$(abspath $(CUDA_PLUGIN))"'

$(CUDA_PLUGIN): $(OBJ_CU) $(FLAGS)
	$(CC) -shared -Wl,-Bsymbolic -o $@ $(filter %.o,$^) $(LDLIBS) $(CUDA_LIBS)

$(BUILD)/f/%.o: %.c $(FLAGS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(CUDA_CFLAGS) -c -o $@ $<

$(BUILD)/d/%.o: %.c $(FLAGS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -DREAL_DOUBLE -c -o $@ $<

# wgmma (kernels/wgmma.cuh) exists only in sm_90a's arch-specific instruction set, so the files
# that use it are built for sm_90a alone (no PTX: sm_90a code runs on compute capability 9.0 only,
# and their switches refuse any other GPU); every other file keeps CUDA_ARCH
WGMMA_CU := kernels/moe/experts_wg.cu
$(patsubst %.cu,$(BUILD)/cu/%.o,$(WGMMA_CU)): CUDA_ARCH = -gencode arch=compute_90a,code=sm_90a

# ptxas's resource usage of every kernel (registers, static shared memory) goes to $@.res, which
# tests/check_launch_limits.py reads after the emulated tests; the rest of nvcc's messages still
# show (a failed compile shows its .res whole)
$(BUILD)/cu/%.o: %.cu $(FLAGS)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) --resource-usage -c -o $@ $< 2> $@.res || { cat $@.res >&2; rm -f $@; exit 1; }
	@grep -v '^ptxas info\|^    [0-9]* bytes stack frame' $@.res >&2 || true

lib: $(LIBOPS)

$(OUT)/lib/libhybrid_ops.so: $(patsubst %.c,$(OUT)/build-lib/f/%.o,$(LIBOPS_SRC))
	@mkdir -p $(dir $@)
	$(CC) -shared -o $@ $^ -lm -fopenmp

$(OUT)/lib/libhybrid_ops_f64.so: $(patsubst %.c,$(OUT)/build-lib/d/%.o,$(LIBOPS_SRC))
	@mkdir -p $(dir $@)
	$(CC) -shared -o $@ $^ -lm -fopenmp

$(OUT)/build-lib/f/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(LIBOPS_CFLAGS) -c -o $@ $<

$(OUT)/build-lib/d/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(LIBOPS_CFLAGS) -DREAL_DOUBLE -c -o $@ $<

# the CLI in double precision: the distributed tests compare 1, 2 and 4 ranks with it
$(BUILD)/hybrid_f64: $(BUILD)/d/train/main.o $(OBJ_D) $(FLAGS)
	@echo "LINK $@"
	@$(CC) $(CFLAGS) -o $@ $(filter %.o,$^) $(LDLIBS)

# tests link against the double-precision build of the library
# (compiled and linked in two steps, so that -MMD records each test's headers)
$(BUILD)/tests/%.o: tests/%.c $(FLAGS)
	@mkdir -p $(dir $@)
	@$(CC) $(CFLAGS) -DREAL_DOUBLE -c -o $@ $<

$(BUILD)/tests/%: $(BUILD)/tests/%.o $(OBJ_D) $(FLAGS)
	@echo "LINK $@"
	@$(CC) $(CFLAGS) -o $@ $(filter %.o,$^) $(LDLIBS)

# `make test`: the system packages (scripts/install_deps.sh), then `make test-only` in a
# second make that detects what is installed now. test-only runs every C test binary, then
# every shell test (which drive ./hybrid), one line each (tests/run_all.sh: a test that
# skips a part says so and is counted; HYBRID_NO_SKIP=1 makes a skip fail), as many at once
# as make's -jN (else one per core; HYBRID_TEST_JOBS=N says how many); then the GPU tests when
# a GPU is visible.
test:
	@sh scripts/install_deps.sh test
	@$(MAKE) --no-print-directory test-only

# kernel files with paths that must give the same bits (fast and general kernels, the split
# gradient kernels and the single one, the Delta layouts, whole-chunk instances; the GLU's and
# the MoE dispatch's scalar and vector kernels; the cross-entropy's launch shapes and its fused
# and separate passes): no sum of two products left for ptxas to contract either way
# (tests/check_contraction.py). The delta-rule family but the scalar backward (chunk_bwd.cu: its
# reverse walk has one such sum, and no test compares it bit for bit with another path).
CONTRACT_CHECKED := $(filter-out kernels/delta_rule/chunk_bwd.cu,$(wildcard kernels/delta_rule/*.cu)) \
                    kernels/norm_glu/glu.cu kernels/moe/dispatch.cu kernels/core/crossentropy.cu

test-only: $(BIN) $(BUILD)/hybrid_f64 vocab lib $(TESTS) $(EMU_TESTS) \
           $(if $(EMU_TESTS),$(EMU)/hash_delta_rule_audit $(EMU)/libhybrid_cuda_emu.so)
	@rm -f $(EMU)/launches.log
	@BUILD=$(BUILD) HYBRID=./$(BIN) HYBRID_EMU_LAUNCH_LOG=$(if $(EMU_TESTS),$(CURDIR)/$(EMU)/launches.log) \
	    sh tests/run_all.sh $(TESTS) $(EMU_TESTS)
	@if [ -n "$(CU_SRC)" ] && [ -n "$(EMU_TESTS)" ]; then \
	    python3 tests/check_launch_limits.py $(EMU)/launches.log $(BUILD)/cu; fi
	@if [ -n "$(CU_SRC)" ]; then python3 tests/check_contraction.py $(NVCC) "$(NVCCFLAGS)" $(CONTRACT_CHECKED); fi
	@if [ -z "$(CU_SRC)" ] || [ "$(SANITIZE)" = 1 ]; then :; \
	elif nvidia-smi -L > /dev/null 2>&1; then $(MAKE) --no-print-directory test-gpu; \
	else echo "note: the CUDA backend was built but no GPU is visible: GPU tests not run (make test-gpu)"; fi

# ---- GPU: parity tests and the GPT-2 benchmark (need nvcc and a visible GPU) ----
# tests/gpu/ programs link the float build of the library plus the CUDA objects; the test
# programs (tests/gpu/test_*.c: one per op family, and test_model) also link the shared
# harness (tests/gpu/harness.c), so a new family's tests are one new file. test_model runs last.
GPU_BIN := $(BUILD)/gpu
# (EMU_ONLY_TESTS: forked children that set the emulator's compute capability or need a process
# with no CUDA context yet; they run in `make test` only)
EMU_ONLY_TESTS := tests/gpu/test_moe_switches.c
GPU_TESTS := $(patsubst tests/gpu/%.c,$(GPU_BIN)/%,\
               $(filter-out tests/gpu/test_model.c $(EMU_ONLY_TESTS),$(wildcard tests/gpu/test_*.c)) tests/gpu/test_model.c)
BENCH_B ?= 64
BENCH_T ?= 1024
BENCH_STEPS ?= 20

$(GPU_BIN)/%.o: tests/gpu/%.c $(FLAGS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(CUDA_CFLAGS) -c -o $@ $<

$(GPU_BIN)/%: $(GPU_BIN)/%.o $(OBJ_F) $(OBJ_CU) $(FLAGS)
	$(CC) $(CFLAGS) -o $@ $(filter %.o,$^) $(LDLIBS) $(CUDA_LIBS)

$(GPU_TESTS): $(GPU_BIN)/%: $(GPU_BIN)/%.o $(GPU_BIN)/harness.o $(OBJ_F) $(OBJ_CU) $(FLAGS)
	$(CC) $(CFLAGS) -o $@ $(filter %.o,$^) $(LDLIBS) $(CUDA_LIBS)

# what the GPU's wgmma reads from kernels/wgmma.cuh's layouts (each operand orientation, and the
# MN-major descriptors with LBO and SBO swapped): a probe, not a test; sm_90a like WGMMA_CU
#   make out/build/gpu/probe_wgmma && out/build/gpu/probe_wgmma
$(GPU_BIN)/probe_wgmma: tests/gpu/probe_wgmma.cu tests/gpu/wgmma_tile.cuh kernels/wgmma.cuh $(FLAGS)
	@mkdir -p $(dir $@)
	$(NVCC) -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -I. -DHAVE_CUDA -o $@ $<

# the delta rule's precision audit on the GPU (docs/delta-rule.md, "Accuracy: the per-operand
# audit"): the delta-rule kernels built again with -DHYBRID_DR_PRECISION_AUDIT into their own folder
#   make out/build/gpu/audit_delta_rule_precision && out/build/gpu/audit_delta_rule_precision
CU_AUDIT := $(BUILD)/cu-audit
CU_AUDIT_OBJ := $(patsubst %.cu,$(CU_AUDIT)/%.o,$(filter kernels/delta_rule/%,$(CU_SRC))) \
                $(filter-out $(BUILD)/cu/kernels/delta_rule/%,$(OBJ_CU))
$(CU_AUDIT)/%.o: %.cu $(FLAGS)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -DHYBRID_DR_PRECISION_AUDIT -c -o $@ $<
$(GPU_BIN)/audit_delta_rule_precision: $(GPU_BIN)/audit_delta_rule_precision.o $(GPU_BIN)/harness.o $(OBJ_F) \
                                       $(CU_AUDIT_OBJ) $(FLAGS)
	$(CC) $(CFLAGS) -o $@ $(filter %.o,$^) $(LDLIBS) $(CUDA_LIBS)
# the delta rule's output hashes (tests/gpu/hash_delta_rule.c; the emulator's builds below)
$(GPU_BIN)/hash_delta_rule: $(GPU_BIN)/hash_delta_rule.o $(GPU_BIN)/harness.o $(OBJ_F) $(OBJ_CU) $(FLAGS)
	$(CC) $(CFLAGS) -o $@ $(filter %.o,$^) $(LDLIBS) $(CUDA_LIBS)
$(GPU_BIN)/hash_delta_rule_audit: $(GPU_BIN)/hash_delta_rule.o $(GPU_BIN)/harness.o $(OBJ_F) $(CU_AUDIT_OBJ) $(FLAGS)
	$(CC) $(CFLAGS) -o $@ $(filter %.o,$^) $(LDLIBS) $(CUDA_LIBS)

# ---- the CUDA emulator (tests/cuda_emu/; docs/cuda.md, "The CPU emulator") ----
# The emulated families' kernels (kernels/<family>/*.cu) and the backend (backend_cuda.cu)
# compiled by the host C++ compiler
# with -DHYBRID_CUDA_EMU, linked with their GPU parity tests (tests/gpu/test_<family>*.c,
# which take smaller sizes there) and the harness: `make test` runs the same checks as
# `make test-gpu`, on the CPU, with no GPU and no nvcc. The CPU reference comes from an
# archive of the float build, so only the objects the tests need are linked. Not under
# SANITIZE=1: the fibers switch stacks, which AddressSanitizer does not follow.
$(EMU)/%.o: %.cu $(FLAGS)
	@mkdir -p $(dir $@)
	$(CXX) $(EMU_CXXFLAGS) -x c++ -c -o $@ $<

$(EMU)/cuda_emu.o: tests/cuda_emu/cuda_emu.cpp $(FLAGS)
	@mkdir -p $(dir $@)
	$(CXX) $(EMU_CXXFLAGS) -c -o $@ $<

$(EMU)/gpu/%.o: tests/gpu/%.c $(FLAGS)
	@mkdir -p $(dir $@)
	@$(CC) $(CFLAGS) -DHYBRID_CUDA_EMU -c -o $@ $<

$(EMU)/libcpu_f.a: $(OBJ_F)
	@rm -f $@
	@ar rcs $@ $^

# The emulated backend as a CUDA plugin: `HYBRID_CUDA_PLUGIN=$(EMU)/libhybrid_cuda_emu.so ./hybrid
# train --device cuda ...` runs the CUDA backend's code through the CLI on the CPU (slowly), with
# MPI on host memory standing in for NCCL (kernels/plugin.cu). The host code comes from ./hybrid
# (-rdynamic), as for the real plugin.
$(EMU)/libhybrid_cuda_emu.so: $(EMU)/kernels/plugin.o $(EMU_OBJ) $(FLAGS)
	@echo "LINK $@ (CUDA emulator)"
	@$(CXX) -shared -fopenmp -Wl,-Bsymbolic -o $@ $(filter %.o,$^)

$(EMU)/test_cuda_emu: $(EMU)/tests/cuda_emu/test_cuda_emu.o $(EMU_OBJ) $(EMU)/libcpu_f.a $(FLAGS)
	@echo "LINK $@ (CUDA emulator)"
	@$(CXX) -fopenmp -o $@ $(filter %.o %.a,$^) $(LDLIBS)

$(filter-out $(EMU)/test_cuda_emu,$(EMU_TESTS)): $(EMU)/%: $(EMU)/gpu/%.o $(EMU)/gpu/harness.o $(EMU_OBJ) $(EMU)/libcpu_f.a $(FLAGS)
	@echo "LINK $@ (CUDA emulator)"
	@$(CXX) -fopenmp -o $@ $(filter %.o %.a,$^) $(LDLIBS)

# The delta-rule benchmark's plumbing under the emulator (not in `make test`: it times nothing
# that means anything): `make out/build/emu/bench_delta_rule`, then e.g.
#   out/build/emu/bench_delta_rule --shape 1,64,1,16,16 --reps 1 --warmup 0
$(EMU)/bench_delta_rule: $(EMU)/gpu/bench_delta_rule.o $(EMU_OBJ) $(EMU)/libcpu_f.a $(FLAGS)
	@echo "LINK $@ (CUDA emulator)"
	@$(CXX) -fopenmp -o $@ $(filter %.o %.a,$^) $(LDLIBS)
# The precision audit of the tensor-core delta rule (docs/delta-rule.md, "Accuracy: the
# per-operand audit"; not in `make test`): the delta-rule kernels built again with
# -DHYBRID_DR_PRECISION_AUDIT into their own folder, linked with tests/gpu/audit_delta_rule_precision.c:
#   make out/build/emu/audit_delta_rule_precision && out/build/emu/audit_delta_rule_precision
# (the GPU build: out/build/gpu/audit_delta_rule_precision, below)
EMU_AUDIT := $(BUILD)/emu-audit
EMU_AUDIT_OBJ := $(patsubst %.cu,$(EMU_AUDIT)/%.o,$(wildcard kernels/delta_rule/*.cu)) \
                 $(filter-out $(EMU)/kernels/delta_rule/%,$(EMU_OBJ))
$(EMU_AUDIT)/%.o: %.cu $(FLAGS)
	@mkdir -p $(dir $@)
	$(CXX) $(EMU_CXXFLAGS) -DHYBRID_DR_PRECISION_AUDIT -x c++ -c -o $@ $<
$(EMU)/audit_delta_rule_precision: $(EMU)/gpu/audit_delta_rule_precision.o $(EMU)/gpu/harness.o $(EMU_AUDIT_OBJ) \
                                   $(EMU)/libcpu_f.a $(FLAGS)
	@echo "LINK $@ (CUDA emulator, precision audit)"
	@$(CXX) -fopenmp -o $@ $(filter %.o %.a,$^) $(LDLIBS)
# Bit hashes of the tensor-core delta rule's outputs (tests/gpu/hash_delta_rule.c; not in `make
# test`), with the normal kernels and with the audit build's (there --mask M drops lo parts):
#   make out/build/emu/hash_delta_rule out/build/emu/hash_delta_rule_audit
$(EMU)/hash_delta_rule: $(EMU)/gpu/hash_delta_rule.o $(EMU)/gpu/harness.o $(EMU_OBJ) $(EMU)/libcpu_f.a $(FLAGS)
	@echo "LINK $@ (CUDA emulator)"
	@$(CXX) -fopenmp -o $@ $(filter %.o %.a,$^) $(LDLIBS)
$(EMU)/hash_delta_rule_audit: $(EMU)/gpu/hash_delta_rule.o $(EMU)/gpu/harness.o $(EMU_AUDIT_OBJ) $(EMU)/libcpu_f.a \
                              $(FLAGS)
	@echo "LINK $@ (CUDA emulator, precision audit)"
	@$(CXX) -fopenmp -o $@ $(filter %.o %.a,$^) $(LDLIBS)
# The MoE benchmark's plumbing likewise: `make out/build/emu/bench_moe`, then e.g.
#   out/build/emu/bench_moe --shape 64,4,2,32,64,64 --shape config:32 --reps 1 --warmup 0 --profile-reps 1
$(EMU)/bench_moe: $(EMU)/gpu/bench_moe.o $(EMU_OBJ) $(EMU)/libcpu_f.a $(FLAGS)
	@echo "LINK $@ (CUDA emulator)"
	@$(CXX) -fopenmp -o $@ $(filter %.o %.a,$^) $(LDLIBS)

ifneq ($(CU_SRC),)
# Every test program, then every config in configs/ trained a few steps and sampled
# (tests/gpu/check_configs.sh), then the Hugging Face checks (export, import; the fla export too when
# FLA_DIR names a flash-linear-attention checkout or a prepared copy with flasrc/), one at a
# time (they share the GPU), one line each (tests/run_all.sh;
# each program's full output in $(GPU_BIN)/<name>.log). HYBRID_GPU_OPS_ONLY=1: the op
# families alone (test_model skips itself, the checks are left out).
GPU_CHECKS := tests/gpu/check_configs.sh tests/gpu/check_hf.sh tests/gpu/check_import_hf.sh $(if $(FLA_DIR),tests/gpu/check_fla_export.sh)
test-gpu: hybrid $(GPU_TESTS) $(GPU_BIN)/dump_logits
	@nvidia-smi -L > /dev/null 2>&1 || { echo "test-gpu: no GPU visible (nvidia-smi -L failed)"; exit 1; }
	@if BUILD=$(BUILD) FLA_DIR=$(FLA_DIR) RUN_SCRIPTS="$(if $(filter-out 0,$(HYBRID_GPU_OPS_ONLY)),,$(GPU_CHECKS))" \
	    HYBRID_TEST_JOBS=1 sh tests/run_all.sh $(GPU_TESTS); then echo "test-gpu: all passed"; \
	else echo "test-gpu: FAILED (logs: $(GPU_BIN)/*.log)"; exit 1; fi

bench: hybrid $(GPU_BIN)/bench_gpt2
	@nvidia-smi -L > /dev/null 2>&1 || { echo "bench: no GPU visible (nvidia-smi -L failed)"; exit 1; }
	@mkdir -p $(OUT)/bench
	$(GPU_BIN)/bench_gpt2 $(BENCH_B) $(BENCH_T) $(BENCH_STEPS) --json $(OUT)/bench/hybrid.json
	HYBRID_CUDA_PROFILE=1 $(GPU_BIN)/bench_gpt2 $(BENCH_B) $(BENCH_T) 5
	python3 scripts/bench_pytorch_gpt2.py --batch $(BENCH_B) --seq $(BENCH_T) --steps $(BENCH_STEPS) \
	    --json $(OUT)/bench/pytorch.json
	python3 scripts/bench_summary.py $(OUT)/bench/hybrid.json $(OUT)/bench/pytorch.json
# `make bench-kda` (BENCHMARKS.md, "H200: chunkwise KDA and GDN against fla"): our chunkwise KDA
# and GDN (tests/gpu/bench_delta_rule.c), then fla's chunk_kda and chunk_gated_delta_rule on the
# same shapes and inputs when FLA_DIR names a prepared copy (fla's tree under flasrc/, a flash_attn stand-in under shim/) or
# an fla checkout (scripts/bench_fla_kda.py; TRITON_CACHE_DIR defaults to out/triton-cache), then
# the side-by-side table (scripts/bench_summary_kda.py). JSON under out/bench/. KDA_BENCH_ARGS go
# to both programs (e.g. "--shape 8,4096,16,128,128 --kinds kda --reps 50"). KDA_FLA_TIMEOUT=S
# stops fla's run after S seconds (Triton autotunes for minutes on a cold cache; the JSON keeps
# the cases done). Ours alone: `make bench-kda-ours`. Exits 1 if either side failed (e.g. our
# kernel not yet ported: it names the missing member), after the summary.
KDA_BENCH_ARGS ?=
KDA_FLA_TIMEOUT ?=
bench-kda: $(GPU_BIN)/bench_delta_rule
	@nvidia-smi -L > /dev/null 2>&1 || { echo "bench-kda: no GPU visible (nvidia-smi -L failed)"; exit 1; }
	@mkdir -p $(OUT)/bench
	@rm -f $(OUT)/bench/kda_ours.json $(OUT)/bench/kda_fla.json
	@st=0; $(GPU_BIN)/bench_delta_rule $(KDA_BENCH_ARGS) --json $(OUT)/bench/kda_ours.json || st=1; \
	if [ -n "$(FLA_DIR)" ]; then \
	    TRITON_CACHE_DIR=$${TRITON_CACHE_DIR:-$(CURDIR)/$(OUT)/triton-cache} FLA_PEER=$(FLA_DIR) \
	        $(if $(KDA_FLA_TIMEOUT),timeout $(KDA_FLA_TIMEOUT)) python3 -u scripts/bench_fla_kda.py $(KDA_BENCH_ARGS) \
	        --json $(OUT)/bench/kda_fla.json || st=1; \
	else echo "bench-kda: FLA_DIR not set: fla not measured (FLA_DIR=out/peers/fla make bench-kda)"; fi; \
	python3 scripts/bench_summary_kda.py $(OUT)/bench/kda_ours.json $(OUT)/bench/kda_fla.json; exit $$st

bench-kda-ours: $(GPU_BIN)/bench_delta_rule
	@mkdir -p $(OUT)/bench
	$(GPU_BIN)/bench_delta_rule $(KDA_BENCH_ARGS) --json $(OUT)/bench/kda_ours.json
# `make bench-moe` (BENCHMARKS.md, "H200: the MoE layer against PyTorch"): our MoE layer
# (tests/gpu/bench_moe.c: model/moe.c's forward and backward, the grouped expert op alone, dense
# cuBLAS GEMMs of the same FLOPs, a profiled breakdown) and the PyTorch reference on the same
# shapes and input distributions (scripts/bench_torch_moe.py: grouped_mm when torch has it), then
# the side-by-side with the two targets (scripts/bench_summary_moe.py). JSON under out/bench/.
# MOE_BENCH_ARGS go to both programs (e.g. "--shape config --reps 50"); MOE_TORCH_TIMEOUT=S
# stops PyTorch's run after S seconds. Ours alone: `make bench-moe-ours`. Exits 1 if either side
# failed, after the summary (a missed target does not fail it).
# `make bench-moe-model`: the whole KL-S (MoE) 3:1 model's training throughput on the Brown
# shards (`make data`; out/data), MOE_MODEL_STEPS steps (median tok/s of the steps after the
# second), the run's final checkpoint deleted; MOE_MODEL_ARGS are more --key value overrides.
MOE_BENCH_ARGS ?=
MOE_TORCH_TIMEOUT ?=
MOE_MODEL_STEPS ?= 8
MOE_MODEL_ARGS ?=
bench-moe: $(GPU_BIN)/bench_moe
	@nvidia-smi -L > /dev/null 2>&1 || { echo "bench-moe: no GPU visible (nvidia-smi -L failed)"; exit 1; }
	@mkdir -p $(OUT)/bench
	@rm -f $(OUT)/bench/moe_ours.json $(OUT)/bench/moe_torch.json
	@st=0; $(GPU_BIN)/bench_moe $(MOE_BENCH_ARGS) --json $(OUT)/bench/moe_ours.json || st=1; \
	$(if $(MOE_TORCH_TIMEOUT),timeout $(MOE_TORCH_TIMEOUT)) python3 -u scripts/bench_torch_moe.py $(MOE_BENCH_ARGS) \
	    --json $(OUT)/bench/moe_torch.json || st=1; \
	python3 scripts/bench_summary_moe.py $(OUT)/bench/moe_ours.json $(OUT)/bench/moe_torch.json; exit $$st

bench-moe-ours: $(GPU_BIN)/bench_moe
	@mkdir -p $(OUT)/bench
	$(GPU_BIN)/bench_moe $(MOE_BENCH_ARGS) --json $(OUT)/bench/moe_ours.json

bench-moe-model: hybrid
	@nvidia-smi -L > /dev/null 2>&1 || { echo "bench-moe-model: no GPU visible (nvidia-smi -L failed)"; exit 1; }
	@ls out/data/brown_train_*.bin > /dev/null 2>&1 || { echo "bench-moe-model: no Brown shards (make data)"; exit 1; }
	@mkdir -p $(OUT)/bench/runs
	@st=0; ./hybrid train configs/kl-s-3-1.conf --device cuda --steps $(MOE_MODEL_STEPS) --warmup_steps 2 \
	    --val_data '' --log_every 1 --sample_tokens 0 --out_dir $(OUT)/bench/runs/kl-s-3-1 --overwrite \
	    $(MOE_MODEL_ARGS) > $(OUT)/bench/kl-s-3-1.log 2>&1 || st=1; tail -n 25 $(OUT)/bench/kl-s-3-1.log; \
	python3 scripts/bench_summary_moe.py model $(OUT)/bench/runs/kl-s-3-1/metrics.jsonl || st=1; \
	rm -rf $(OUT)/bench/runs/kl-s-3-1/checkpoints; exit $$st
# `make bench-hybrid` (BENCHMARKS.md, "H200: the 3:1 hybrid against fla"): our trainer
# (`./hybrid train --device cuda`, configs/bench-kda-3-1.conf and its variants, synthetic tokens)
# against fla's KDAForCausalLM on the same architecture when FLA_DIR names a prepared copy or a
# checkout (scripts/bench_fla_hybrid.py; TRITON_CACHE_DIR defaults to out/triton-cache;
# HYBRID_FLA_TIMEOUT=S stops fla's run after S seconds), then the side-by-side table; all in
# scripts/bench_hybrid.sh (its header: the cases, the method, the environment). JSON under
# out/bench/ (hybrid_ours.json, hybrid_fla.json). Exits 1 if a run failed; a family the CUDA
# backend does not hand out yet (KKKM: MLA) is recorded as refused and does not fail it.
HYBRID_FLA_TIMEOUT ?=
bench-hybrid: hybrid
	@nvidia-smi -L > /dev/null 2>&1 || { echo "bench-hybrid: no GPU visible (nvidia-smi -L failed)"; exit 1; }
	OUT=$(OUT) FLA_DIR=$(FLA_DIR) FLA_TIMEOUT=$(HYBRID_FLA_TIMEOUT) bash scripts/bench_hybrid.sh
else
test-gpu bench bench-kda bench-kda-ours bench-hybrid bench-moe bench-moe-ours bench-moe-model:
	@echo "$@: this build has no CUDA (nvcc not found)"; exit 1
endif

# `make data`: the Brown corpus (scripts/setup_data.sh); `make data CORPUS=prose`: the ~20M-token
# prose corpus (scripts/setup_corpus.sh; data/README.md, "The prose corpus")
CORPUS ?= brown
data:
	@sh scripts/install_deps.sh train
	@if [ "$(CORPUS)" = brown ]; then sh scripts/setup_data.sh; else sh scripts/setup_corpus.sh $(CORPUS); fi

# the GPT-2 vocabulary files (encoder.json, vocab.bpe) that the tokenizer tests need
vocab:
	@sh scripts/fetch_vocab.sh

# `make train`: the system packages, then (a second make, which sees them) build, data, train
train:
	@sh scripts/install_deps.sh train
	@$(MAKE) --no-print-directory train-only

# (--resume auto: a second `make train` goes on from an interrupted run, or says the run is
# done; TRAIN_ARGS=--overwrite without the resume starts over)
TRAIN_ARGS ?= --resume auto
train-only: hybrid
	@HYBRID=./hybrid sh scripts/setup_data.sh
	./hybrid train configs/default.conf $(TRAIN_ARGS)

clean:
	rm -rf $(OUT)/build $(OUT)/build-san $(OUT)/build-lib $(OUT)/lib hybrid

# header dependencies (-MMD): library objects, both CLIs, the test and GPU test programs
-include $(OBJ_F:.o=.d) $(OBJ_D:.o=.d) $(OBJ_CU:.o=.d) $(BUILD)/f/train/main.d $(BUILD)/d/train/main.d $(TESTS:=.d) \
         $(wildcard $(GPU_BIN)/*.d $(OUT)/build-lib/*/*/*.d $(OUT)/build-lib/*/*/*/*.d) \
         $(wildcard $(EMU)/*.d $(EMU)/gpu/*.d $(EMU)/kernels/*/*.d $(EMU)/tests/*/*.d) \
         $(wildcard $(EMU_AUDIT)/kernels/*/*.d $(CU_AUDIT)/kernels/*/*.d)
