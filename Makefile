# Ember build. `make` builds the library, the tools and the tests into build/;
# `make test` runs every test (plain, then under ASan+UBSan, then the fuzzers
# briefly); `make demo` shows the devices, their dispatch plans and a self-test.
# Missing Debian packages are installed first (build-tools/deps.sh).
#
# Knobs: EMBER_ARCHS (SMs to build cubins for), NVCC, NVCC_LEGACY (an older nvcc
# adding cubins for SMs below 7.5), PTXAS_LEGACY (an older ptxas doing the same
# from the legacy PTX; default: the PyPI ptxas 11.8 in .tools/), NVRTC_CUBIN_VERSIONS
# (the PyPI NVRTCs of .tools/ that add cubins for CUDA 11.x / 12.x drivers;
# default: all of them), CLANG, PREFIX, BUILD, SAN=1 (sanitizers).

.DEFAULT_GOAL := all
SHELL := /bin/bash

VERSION := 0.1.0
SOVERSION := 0
BUILD ?= build
# Where the device images (cubins) are built: the sanitizer build takes the
# plain build's (test-san passes KBUILD=build): device code does not depend
# on the host compiler's sanitizer flags, and building every cubin twice
# doubled the kernel compile time of `make test`.
KBUILD ?= $(BUILD)
PREFIX ?= /usr/local

CC ?= gcc
ifeq ($(origin CC),default)
CC := gcc
endif
CLANG ?= $(shell command -v clang 2>/dev/null)
NVCC ?= $(shell command -v nvcc 2>/dev/null || { test -x /usr/local/cuda/bin/nvcc && echo /usr/local/cuda/bin/nvcc; })
NVCC_LEGACY ?=
PTXAS ?= $(shell command -v ptxas 2>/dev/null || { test -x /usr/local/cuda/bin/ptxas && echo /usr/local/cuda/bin/ptxas; })
DEFAULT_ARCHS := 75 80 86 89 90 100 120
EMBER_ARCHS ?= $(DEFAULT_ARCHS)
LEGACY_ARCHS := 35 37 50 52 53 60 61 62 70 72

# ---- PyPI CUDA tools (.tools/) ----
# build-tools/pypi_tools.sh installs ptxas 11.8 and NVRTC 11.8 / 12.x from PyPI
# into .tools/ (git-ignored) and writes .tools/tools.mk with their paths.
# Including that file makes make run the installer first when the file is
# missing or older than the script, then restart with the tools in place: a
# fresh clone's first `make` already embeds the sm_35 ... sm_72 cubins. Offline
# the installer still writes the file, and the build goes on without them
# (`make deps` prints the one line that says so and how to add them).
ifneq ($(filter-out clean,$(or $(MAKECMDGOALS),all)),)
-include .tools/tools.mk
endif

# Missing Debian packages are installed while the Makefile is read, before any
# rule runs: as a prerequisite of `all` the installer raced the compilers under
# -j (gelf.h not found on a fresh machine). Once per top-level make, not per
# restart or recursive call.
ifeq ($(MAKELEVEL)$(MAKE_RESTARTS),0)
ifneq ($(filter-out clean deps,$(or $(MAKECMDGOALS),all)),)
ifneq ($(shell bash build-tools/deps.sh >&2; echo $$?),0)
$(error build-tools/deps.sh could not install the packages named above)
endif
endif
endif
.tools/tools.mk: build-tools/pypi_tools.sh
	@bash build-tools/pypi_tools.sh --record
# PTXAS_LEGACY: a ptxas that still targets sm_35 ... sm_72 (CUDA 11.x). It
# assembles clang's legacy PTX into cubins for the LEGACY_ARCHS that
# NVCC_LEGACY does not cover.
# NVRTC_CUBIN_VERSIONS: the PyPI NVRTCs (by CUDA version, "11.8 12.9") that
# compile kernels/ into cubins for NVRTC_CUBIN_ARCHS_<version> at build time
# (build-tools/nvrtc_cubin.c, the runtime's own NVRTC call). nvcc 13's cubins
# need an R580 driver; these load on any CUDA 11.x (R450+) or 12.x (R525+)
# driver through minor-version compatibility, so an A100 on R470 or an H100 on
# R535 gets a cubin of its own SM instead of JIT-compiling the legacy PTX.
# PTXAS= (a build without CUDA compilers) leaves both out; so does a build
# without .tools/ (offline).
ifeq ($(origin PTXAS)$(PTXAS),command line)
PTXAS_LEGACY ?=
NVRTC_CUBIN_VERSIONS ?=
else
PTXAS_LEGACY ?= $(wildcard $(PYPI_PTXAS))
NVRTC_CUBIN_VERSIONS ?= $(foreach v,$(PYPI_NVRTC_VERSIONS),$(if $(wildcard $(PYPI_NVRTC_LIB_$(v))),$(v)))
endif
# The SMs each NVRTC makes cubins for: the ones nvcc 13 makes (EMBER_ARCHS)
# and the Orin's sm_87, as far as that NVRTC targets them (CUDA 11.8 ends at
# sm_90; docs/nvrtc-sm.md). Through the policy's step 2 the sm_100 and sm_120
# cubins also serve 10.3 (B300) and 12.1 (GB10).
NVRTC_CUBIN_ARCHS_11.8 := 75 80 86 87 89 90
NVRTC_CUBIN_ARCHS_12.9 := 75 80 86 87 89 90 100 120
$(foreach v,$(NVRTC_CUBIN_VERSIONS),$(if $(NVRTC_CUBIN_ARCHS_$(v)),,$(warning NVRTC $(v) in .tools/ has no \
  NVRTC_CUBIN_ARCHS_$(v) in the Makefile: it makes no cubins)))
# ---- end PyPI CUDA tools ----

# Short build lines; V=1 shows the full commands.
V ?= 0
ifeq ($(V),1)
Q :=
say := @true
else
Q := @
say := @printf '  %-8s %s\n'
endif

WERROR ?= 1
CSTD := -std=c11 -D_GNU_SOURCE
# Messages go into fixed buffers and are cut short by design: no truncation warnings.
WARN := -Wall -Wextra -Wno-format-truncation $(if $(filter 1,$(WERROR)),-Werror)
INCLUDES := -Iinclude -Iruntime -Iarch_table -Iops -Iengine -Itraining
OPT ?= -O2 -g
comma := ,
SANITIZERS := -fsanitize=address$(comma)undefined -fno-omit-frame-pointer -fno-sanitize-recover=all
# Sanitizer builds also poison op outputs (engine/tensor.c: em_tensor_empty).
SAN_FLAGS := $(if $(filter 1,$(SAN)),$(SANITIZERS) -DEM_POISON_OUTPUTS)
# OpenMP parallelises the CPU ops' loops (split by output element, so results
# never depend on the thread count); OpenBLAS does the GEMMs.
# No FMA contraction: the AVX2/AVX-512 clones of hot loops (EM_SIMD_CLONES)
# must give the baseline build's bits (ISO C mode implies it; said outright).
CFLAGS_ALL := $(CSTD) $(OPT) $(WARN) -ffp-contract=off -fPIC -fopenmp $(INCLUDES) $(SAN_FLAGS) $(CFLAGS)
LIB_CFLAGS := $(CFLAGS_ALL) -fvisibility=hidden -DEMBER_BUILDING_LIBRARY
LIBS := -lelf -lzstd -llz4 -lz -ljansson -ldl -lpthread -lm
LDFLAGS_ALL := -fopenmp $(SAN_FLAGS) $(LDFLAGS)

# ---------------------------------------------------------------- kernels ---
MODULES := $(basename $(notdir $(wildcard kernels/*.cu)))
KERNEL_HEADERS := $(wildcard kernels/*.h)
-include ptx/STAMP.mk
PTX_NEW := $(wildcard ptx/*.compute_*.ptx)
PTX_LEGACY := $(wildcard ptx/*.sm_35.ptx)

ifneq ($(NVCC),)
NVCC_SUPPORTED := $(shell $(NVCC) --list-gpu-code 2>/dev/null | sed -n 's/^sm_\([0-9]*\)$$/\1/p')
NVCC_VERSION := $(shell $(NVCC) --version 2>/dev/null | sed -n 's/.*release [0-9.]*, V\([0-9.]*\).*/\1/p')
CUBIN_ARCHS := $(filter $(NVCC_SUPPORTED),$(EMBER_ARCHS))
endif
ifneq ($(NVCC_LEGACY),)
LEGACY_SUPPORTED := $(shell $(NVCC_LEGACY) --list-gpu-code 2>/dev/null | sed -n 's/^sm_\([0-9]*\)$$/\1/p')
LEGACY_VERSION := $(shell $(NVCC_LEGACY) --version 2>/dev/null | sed -n 's/.*release [0-9.]*, V\([0-9.]*\).*/\1/p')
LEGACY_CUBIN_ARCHS := $(filter $(LEGACY_SUPPORTED),$(LEGACY_ARCHS))
endif
# One system for the SMs below 7.5: NVCC_LEGACY (from the .cu sources) wins for
# the LEGACY_ARCHS it supports; PTXAS_LEGACY assembles the committed legacy PTX
# (clang, ISA 3.2) for the rest it supports. Only -arch is passed: the PTX
# already spells every float add/sub/mul as .rn, which ptxas never contracts.
PTX_LEGACY_MODULES := $(patsubst ptx/%.sm_35.ptx,%,$(PTX_LEGACY))
ifneq ($(PTXAS_LEGACY),)
PTXAS_LEGACY_SUPPORTED := $(shell $(PTXAS_LEGACY) --help 2>/dev/null | grep -o "'sm_[0-9]*'" | tr -dc '0-9\n')
PTXAS_LEGACY_VERSION := $(shell $(PTXAS_LEGACY) --version 2>/dev/null | sed -n 's/.*release [0-9.]*, V\([0-9.]*\).*/\1/p')
PTXAS_CUBIN_ARCHS := $(filter-out $(LEGACY_CUBIN_ARCHS),$(filter $(PTXAS_LEGACY_SUPPORTED),$(LEGACY_ARCHS)))
endif

# Portable numerics: no FMA contraction in any build of the kernels.
NVCC_KFLAGS := --fmad=false -O3 -Ikernels
CLANG_KFLAGS := -x cuda --cuda-device-only -nocudainc -nocudalib -O3 -ffp-contract=off \
  -Wno-unknown-cuda-version -Ikernels

CUBINS := $(foreach m,$(MODULES),$(foreach a,$(CUBIN_ARCHS),$(KBUILD)/kernels/$(m).sm_$(a).cubin))
LEGACY_CUBINS := $(foreach m,$(MODULES),$(foreach a,$(LEGACY_CUBIN_ARCHS),$(KBUILD)/kernels/legacy/$(m).sm_$(a).cubin))
PTXAS_CUBINS := $(foreach m,$(PTX_LEGACY_MODULES),$(foreach a,$(PTXAS_CUBIN_ARCHS),$(KBUILD)/kernels/ptxas/$(m).sm_$(a).cubin))
NVRTC_CUBINS := $(foreach v,$(NVRTC_CUBIN_VERSIONS),$(foreach m,$(MODULES),$(foreach a,$(NVRTC_CUBIN_ARCHS_$(v)),\
  $(KBUILD)/kernels/nvrtc-$(v)/$(m).sm_$(a).cubin)))

$(KBUILD)/kernels/%.cubin: $(KERNEL_HEADERS)
	@mkdir -p $(@D)
	$(say) NVCC $@
	$(Q)$(NVCC) -cubin -arch=$(lastword $(subst ., ,$*)) $(NVCC_KFLAGS) kernels/$(firstword $(subst ., ,$*)).cu -o $@

$(KBUILD)/kernels/legacy/%.cubin: $(KERNEL_HEADERS)
	@mkdir -p $(@D)
	$(say) NVCC $@
	$(Q)$(NVCC_LEGACY) -cubin -arch=$(lastword $(subst ., ,$*)) $(NVCC_KFLAGS) kernels/$(firstword $(subst ., ,$*)).cu -o $@

# Each cubin also depends on its module's source.
define cubin_deps
$(KBUILD)/kernels/$(1).sm_$(2).cubin: kernels/$(1).cu
endef
$(foreach m,$(MODULES),$(foreach a,$(CUBIN_ARCHS),$(eval $(call cubin_deps,$(m),$(a)))))
define legacy_cubin_deps
$(KBUILD)/kernels/legacy/$(1).sm_$(2).cubin: kernels/$(1).cu
endef
$(foreach m,$(MODULES),$(foreach a,$(LEGACY_CUBIN_ARCHS),$(eval $(call legacy_cubin_deps,$(m),$(a)))))

# ptxas cubins: build/kernels/ptxas/<module>.sm_XY.cubin from ptx/<module>.sm_35.ptx.
$(KBUILD)/kernels/ptxas/%.cubin: $(PTXAS_LEGACY)
	@mkdir -p $(@D)
	$(say) PTXAS $@
	$(Q)$(PTXAS_LEGACY) -arch=$(lastword $(subst ., ,$*)) ptx/$(firstword $(subst ., ,$*)).sm_35.ptx -o $@
define ptxas_cubin_deps
$(KBUILD)/kernels/ptxas/$(1).sm_$(2).cubin: ptx/$(1).sm_35.ptx
endef
$(foreach m,$(PTX_LEGACY_MODULES),$(foreach a,$(PTXAS_CUBIN_ARCHS),$(eval $(call ptxas_cubin_deps,$(m),$(a)))))

# NVRTC cubins: build/kernels/nvrtc-<version>/<module>.sm_XY.cubin from
# kernels/<module>.cu and every kernel header, by build-tools/nvrtc_cubin.c
# (em_nvrtc_compile: --gpu-architecture=sm_XY --fmad=false, as the runtime's
# step 4). Each is remade when its source, a header, the NVRTC library or the
# code that drives the compile changes; relinking the tool for other reasons
# (an arch_table row, say) remakes none (order-only).
NVRTC_CUBIN_TOOL := $(BUILD)/bin/nvrtc_cubin
NVRTC_CUBIN_TOOL_SRCS := build-tools/nvrtc_cubin.c build-tools/nvrtc_module.c runtime/nvrtc.c runtime/cubin.c \
  runtime/error.c arch_table/arch_table.c
NVRTC_HEADER_ARGS := $(foreach h,$(KERNEL_HEADERS),--header $(notdir $(h)) $(h))
define nvrtc_cubin_rule
$(KBUILD)/kernels/nvrtc-$(1)/$(2).sm_$(3).cubin: kernels/$(2).cu $(KERNEL_HEADERS) $(PYPI_NVRTC_LIB_$(1)) \
  build-tools/nvrtc_cubin.c build-tools/nvrtc_module.c runtime/nvrtc.c | $(NVRTC_CUBIN_TOOL)
	@mkdir -p $$(@D)
	$$(say) NVRTC $$@
	$$(Q)$(NVRTC_CUBIN_TOOL) --nvrtc $(PYPI_NVRTC_LIB_$(1)) --sm $(3) --out $$@ $(NVRTC_HEADER_ARGS) kernels/$(2).cu
endef
$(foreach v,$(NVRTC_CUBIN_VERSIONS),$(foreach m,$(MODULES),$(foreach a,$(NVRTC_CUBIN_ARCHS_$(v)),\
  $(eval $(call nvrtc_cubin_rule,$(v),$(m),$(a))))))

# ------------------------------------------------------ committed PTX: ptx/ ---
# `make ptx` regenerates ptx/ from kernels/; the build embeds what is committed.
.PHONY: ptx check-ptx
# PTX_MODULES="unary binary" regenerates only those modules' PTX (the stamp
# always covers every source). The committed PTX is made for DEFAULT_ARCHS
# whatever EMBER_ARCHS a build narrows to.
ptx:
	@bash build-tools/make_ptx.sh ptx "$(NVCC)" "$(CLANG)" "$(DEFAULT_ARCHS)" $(PTX_MODULES)

check-ptx:
	@bash build-tools/check_ptx.sh "$(NVCC)" "$(CLANG)" "$(DEFAULT_ARCHS)" "$(PTXAS)"

# ------------------------------------------------------------- image table ---
GEN := $(BUILD)/gen
PACK := $(BUILD)/bin/pack_images
# Each image is its own zstd frame at this level (0 stores them as they are);
# pack_images.c has the sizes and times that chose 3.
EMBER_IMAGE_ZSTD ?= 3
PACK_ARGS = --zstd-level $(EMBER_IMAGE_ZSTD) \
  $(foreach m,$(MODULES),$(foreach a,$(CUBIN_ARCHS),--cubin $(m) - "nvcc $(NVCC_VERSION)" $(KBUILD)/kernels/$(m).sm_$(a).cubin)) \
  $(foreach m,$(MODULES),$(foreach a,$(LEGACY_CUBIN_ARCHS),--cubin $(m) - "nvcc $(LEGACY_VERSION)" $(KBUILD)/kernels/legacy/$(m).sm_$(a).cubin)) \
  $(foreach m,$(PTX_LEGACY_MODULES),$(foreach a,$(PTXAS_CUBIN_ARCHS),--cubin $(m) - "clang $(PTX_CLANG_VERSION) + ptxas $(PTXAS_LEGACY_VERSION)" $(KBUILD)/kernels/ptxas/$(m).sm_$(a).cubin)) \
  $(foreach v,$(NVRTC_CUBIN_VERSIONS),$(foreach m,$(MODULES),$(foreach a,$(NVRTC_CUBIN_ARCHS_$(v)),--cubin $(m) - "nvrtc $(PYPI_NVRTC_PKG_$(v))" $(KBUILD)/kernels/nvrtc-$(v)/$(m).sm_$(a).cubin))) \
  $(foreach f,$(PTX_NEW),--ptx $(firstword $(subst ., ,$(notdir $(f)))) $(PTX_NVCC_TOOLKIT) "nvcc $(PTX_NVCC_VERSION)" $(f)) \
  $(foreach f,$(PTX_LEGACY),--ptx-legacy $(firstword $(subst ., ,$(notdir $(f)))) "clang $(PTX_CLANG_VERSION)" $(f)) \
  $(foreach m,$(MODULES),--source $(m) kernels/$(m).cu) \
  $(foreach h,$(KERNEL_HEADERS),--header $(notdir $(h)) $(h))

# What goes into the table depends on the configuration too (NVCC, PTXAS,
# .tools/, EMBER_ARCHS), not only on the files: pack-args.txt changes when the
# list does, so `make NVCC= PTXAS=` in a folder built with the compilers packs
# a table without their cubins instead of keeping the old one.
$(GEN)/pack-args.txt: FORCE
	@mkdir -p $(@D)
	@printf '%s\n' '$(PACK_ARGS)' | cmp -s - $@ || printf '%s\n' '$(PACK_ARGS)' > $@
$(GEN)/images.bin: $(PACK) $(CUBINS) $(LEGACY_CUBINS) $(PTXAS_CUBINS) $(NVRTC_CUBINS) $(PTX_NEW) $(PTX_LEGACY) $(wildcard kernels/*) ptx/STAMP.mk \
  $(GEN)/pack-args.txt
	@mkdir -p $(@D)
	$(say) PACK $@
	$(Q)$(PACK) $@ $(PACK_ARGS)

# ---------------------------------------------------------- arch_table data ---
%/gen/arch_table_data.c: arch_table/gen.sh $(wildcard arch_table/data/*.tsv)
	@mkdir -p $(@D)
	$(say) GEN $@
	$(Q)sh arch_table/gen.sh $@ arch_table/data

# ------------------------------------------------------------ op families ---
# The op registry lists every ops/*.c file that defines a table em_ops_<f>[]
# (strong references, so a static link pulls every family in).
OP_FAMILY_FILES := $(shell grep -l '^const em_op_def em_ops_' ops/*.c 2>/dev/null)
# Always re-run (cheap): the script rewrites the header only when the list changed.
%/gen/op_families.h: FORCE
	@mkdir -p $(@D)
	$(Q)sh build-tools/op_families.sh $@ $(OP_FAMILY_FILES)
.PHONY: FORCE
FORCE:
$(BUILD)/obj/engine/op_registry.o: $(GEN)/op_families.h
$(BUILD)/obj/engine/op_registry.o: LIB_CFLAGS += -I$(GEN)

# ----------------------------------------------------------------- library ---
LIB_C_SRCS := $(wildcard runtime/*.c arch_table/*.c ops/*.c engine/*.c training/*.c)
LIB_OBJS := $(patsubst %.c,$(BUILD)/obj/%.o,$(LIB_C_SRCS)) $(BUILD)/obj/gen/arch_table_data.o \
  $(BUILD)/obj/runtime/image_section.o
DEPFILES := $(LIB_OBJS:.o=.d)

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(@D)
	$(say) CC $<
	$(Q)$(CC) $(LIB_CFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/obj/gen/arch_table_data.o: $(GEN)/arch_table_data.c
	@mkdir -p $(@D)
	$(say) CC $<
	$(Q)$(CC) $(LIB_CFLAGS) -c $< -o $@

$(BUILD)/obj/runtime/image_section.o: runtime/image_section.S $(GEN)/images.bin
	@mkdir -p $(@D)
	$(say) AS $<
	$(Q)$(CC) -c -DEMBER_IMAGE_BLOB='"$(abspath $(GEN)/images.bin)"' $< -o $@

# The packer is a host tool built from the readers it shares with the runtime.
PACK_SRCS := build-tools/pack_images.c runtime/cubin.c runtime/ptx_header.c runtime/policy.c runtime/error.c \
  arch_table/arch_table.c
$(PACK): $(PACK_SRCS) $(GEN)/arch_table_data.c $(wildcard runtime/*.h arch_table/*.h)
	@mkdir -p $(@D)
	$(say) LINK $@
	$(Q)$(CC) $(CSTD) -O1 -g $(WARN) $(INCLUDES) $(PACK_SRCS) $(GEN)/arch_table_data.c -lelf -lzstd -lpthread -o $@

# The NVRTC cubin compiler: a host tool from the same loader and readers.
$(NVRTC_CUBIN_TOOL): $(NVRTC_CUBIN_TOOL_SRCS) build-tools/nvrtc_module.h $(GEN)/arch_table_data.c \
  $(wildcard runtime/*.h arch_table/*.h)
	@mkdir -p $(@D)
	$(say) LINK $@
	$(Q)$(CC) $(CSTD) -O1 -g $(WARN) $(INCLUDES) -Ibuild-tools $(NVRTC_CUBIN_TOOL_SRCS) $(GEN)/arch_table_data.c \
	  -lelf -ldl -lpthread -o $@

SONAME := libember.so.$(SOVERSION)
LIB_SO := $(BUILD)/lib/libember.so.$(VERSION)
LIB_A := $(BUILD)/lib/libember.a

$(LIB_SO): $(LIB_OBJS)
	@mkdir -p $(@D)
	$(say) LINK $@
	$(Q)$(CC) -shared -Wl,-soname,$(SONAME) -Wl,--no-undefined $(LDFLAGS_ALL) $^ $(LIBS) -o $@
	$(Q)ln -sf libember.so.$(VERSION) $(BUILD)/lib/$(SONAME)
	$(Q)ln -sf $(SONAME) $(BUILD)/lib/libember.so

$(LIB_A): $(LIB_OBJS)
	@mkdir -p $(@D)
	$(say) AR $@
	$(Q)rm -f $@
	$(Q)ar rcs $@ $^

$(BUILD)/lib/ember.pc: build-tools/ember.pc.in
	@mkdir -p $(@D)
	$(Q)sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@VERSION@|$(VERSION)|g' $< > $@

# ------------------------------------------------------------------- tools ---
TOOL_LIBS := -ljansson -lm
$(BUILD)/bin/ember: $(wildcard tools/ember/*.c tools/common/*.c) $(LIB_SO) $(wildcard include/ember/*.h tools/common/*.h)
	@mkdir -p $(@D)
	$(say) LINK $@
	$(Q)$(CC) $(CFLAGS_ALL) -Itools/common $(filter %.c,$^) -L$(BUILD)/lib -lember -Wl,-rpath,'$$ORIGIN/../lib' \
	  $(LDFLAGS_ALL) $(TOOL_LIBS) -o $@

# gpucheck is linked statically with libember.a: it reads arch_table and the
# image readers directly (it diagnoses the layer it would otherwise depend on),
# and one self-contained binary is what an operator wants to copy to a host.
GC_SRCS := $(filter-out tools/gpucheck/main.c,$(wildcard tools/gpucheck/*.c))
GC_OBJS := $(patsubst %.c,$(BUILD)/obj/%.o,$(GC_SRCS))
GC_LIB := $(BUILD)/lib/libgpucheck.a
GC_CFLAGS := $(CFLAGS_ALL) -Itools/gpucheck

$(BUILD)/obj/tools/gpucheck/%.o: tools/gpucheck/%.c $(wildcard tools/gpucheck/*.h)
	@mkdir -p $(@D)
	$(say) CC $<
	$(Q)$(CC) $(GC_CFLAGS) -MMD -MP -c $< -o $@
# Header dependencies (a public struct changing size must rebuild its readers).
DEPFILES += $(GC_OBJS:.o=.d)

$(GC_LIB): $(GC_OBJS)
	@mkdir -p $(@D)
	$(say) AR $@
	$(Q)rm -f $@
	$(Q)ar rcs $@ $^

$(BUILD)/bin/gpucheck: tools/gpucheck/main.c $(GC_LIB) $(LIB_A) $(wildcard tools/gpucheck/*.h)
	@mkdir -p $(@D)
	$(say) LINK $@
	$(Q)$(CC) $(GC_CFLAGS) $< $(GC_LIB) $(LIB_A) $(LDFLAGS_ALL) -ljansson $(LIBS) -o $@

# ------------------------------------------------------------------- tests ---
UNIT_SRCS := $(wildcard tests/unit/test_*.c)
UNIT_BINS := $(patsubst tests/unit/%.c,$(BUILD)/tests/unit/%,$(UNIT_SRCS))
FAKECUDA := $(BUILD)/tests/fakecuda/libcuda.so.1
FAKE_SRCS := $(wildcard tests/fakecuda/*.c) runtime/cubin.c runtime/ptx_header.c runtime/fatbin.c runtime/error.c

# Shared test code (tests/support/: the op test kit) is one static library
# every unit test links.
TESTSUP_SRCS := $(wildcard tests/support/*.c)
TESTSUP_OBJS := $(patsubst %.c,$(BUILD)/obj/%.o,$(TESTSUP_SRCS))
TESTSUP_LIB := $(BUILD)/lib/libtestsupport.a

$(BUILD)/obj/tests/support/%.o: tests/support/%.c $(wildcard tests/support/*.h)
	@mkdir -p $(@D)
	$(say) CC $<
	$(Q)$(CC) $(CFLAGS_ALL) -Itests -Itests/support -MMD -MP -c $< -o $@
DEPFILES += $(TESTSUP_OBJS:.o=.d)

$(TESTSUP_LIB): $(TESTSUP_OBJS)
	@mkdir -p $(@D)
	$(Q)rm -f $@
	$(Q)ar rcs $@ $^

$(BUILD)/tests/unit/%: tests/unit/%.c $(GC_LIB) $(LIB_A) $(TESTSUP_LIB) $(wildcard tests/unit/*.h tests/support/*.h)
	@mkdir -p $(@D)
	$(say) LINK $@
	$(Q)$(CC) $(GC_CFLAGS) -Itests -Itests/support $< $(TESTSUP_LIB) $(GC_LIB) $(LIB_A) $(LDFLAGS_ALL) -lcmocka \
	  -ljansson $(LIBS) -o $@

# The every-op-every-device test links every family's case table.
OP_CASES := $(wildcard tests/unit/op_cases/*.c)
$(BUILD)/tests/unit/test_ops_devices: tests/unit/test_ops_devices.c $(OP_CASES) $(wildcard tests/unit/op_cases/*.h \
  tests/unit/op_cases/*.inc) $(GC_LIB) $(LIB_A) $(TESTSUP_LIB)
	@mkdir -p $(@D)
	$(say) LINK $@
	$(Q)$(CC) $(GC_CFLAGS) -Wno-missing-field-initializers -Itests -Itests/unit -Itests/support $< $(OP_CASES) $(TESTSUP_LIB) $(GC_LIB) $(LIB_A) \
	  $(LDFLAGS_ALL) -lcmocka -ljansson $(LIBS) -o $@

# The .npy reader and writer of the ember tool has its own test, linked with it.
$(BUILD)/tests/unit/test_npy: tests/unit/test_npy.c tools/ember/npy.c tools/ember/npy.h $(GC_LIB) $(LIB_A) $(TESTSUP_LIB)
	@mkdir -p $(@D)
	$(say) LINK $@
	$(Q)$(CC) $(GC_CFLAGS) -Itests -Itools/ember $< tools/ember/npy.c $(TESTSUP_LIB) $(GC_LIB) $(LIB_A) $(LDFLAGS_ALL) \
	  -lcmocka -ljansson $(LIBS) -o $@
# So does the model zoo's test (its inputs and onnxruntime's outputs are .npy).
$(BUILD)/tests/unit/test_onnx_zoo: tests/unit/test_onnx_zoo.c tools/ember/npy.c tools/ember/npy.h $(GC_LIB) $(LIB_A) $(TESTSUP_LIB)
	@mkdir -p $(@D)
	$(say) LINK $@
	$(Q)$(CC) $(GC_CFLAGS) -Itests -Itests/support -Itools/ember $< tools/ember/npy.c $(TESTSUP_LIB) $(GC_LIB) $(LIB_A) $(LDFLAGS_ALL) \
	  -lcmocka -ljansson $(LIBS) -o $@

# The test double runs Ember's kernels from their host builds: kernels/*.cu
# (and its own test kernels) compiled as C through em_kernel.h's host branch,
# called through wrappers generated from the kernel signatures. Everything in
# it is hidden but the driver's entry points and the test hooks, so a kernel
# named like a libember function (em_fill_f32) never binds to the library's.
FAKE_KERNEL_SRCS := $(wildcard kernels/*.cu tests/fakecuda/*.cu)
FAKE_KERNEL_OBJS := $(patsubst %.cu,$(BUILD)/obj/fakecuda/%.o,$(FAKE_KERNEL_SRCS))
FAKE_WRAPPERS := $(GEN)/fakecuda_kernels.c
FAKE_CFLAGS := $(CFLAGS_ALL) -fvisibility=hidden -Ikernels -Itests/fakecuda

$(BUILD)/obj/fakecuda/%.o: %.cu $(KERNEL_HEADERS)
	@mkdir -p $(@D)
	$(say) CC $<
	$(Q)$(CC) $(FAKE_CFLAGS) -x c -c $< -o $@

$(FAKE_WRAPPERS): build-tools/kernel_wrappers.sh $(FAKE_KERNEL_SRCS) $(KERNEL_HEADERS)
	@mkdir -p $(@D)
	$(say) GEN $@
	$(Q)bash build-tools/kernel_wrappers.sh $(CC) $@ kernels $(FAKE_KERNEL_SRCS)

$(FAKECUDA): $(FAKE_SRCS) $(FAKE_KERNEL_OBJS) $(FAKE_WRAPPERS) $(wildcard tests/fakecuda/*.h runtime/*.h) $(KERNEL_HEADERS)
	@mkdir -p $(@D)
	$(say) LINK $@
	$(Q)$(CC) -shared $(FAKE_CFLAGS) -Wl,-soname,libcuda.so.1 $(FAKE_SRCS) $(FAKE_WRAPPERS) $(FAKE_KERNEL_OBJS) \
	  $(LDFLAGS_ALL) -lelf -lzstd -llz4 -lpthread -lm -o $@

# ---- fakecudnn ----
# The test double of cuDNN's legacy C API (tests/fakecudnn/README.md):
# libcudnn.so.9, exporting only cuDNN's entry points and its test hooks
# (-fvisibility=hidden). It computes on the libcuda double, which it finds
# already loaded (dlopen RTLD_NOLOAD), so it links no CUDA library. Tests
# find it through FAKECUDNN_LIB (build-tools/run_tests.sh).
FAKECUDNN := $(BUILD)/tests/fakecudnn/libcudnn.so.9
FAKECUDNN_SRCS := $(wildcard tests/fakecudnn/*.c)
$(FAKECUDNN): $(FAKECUDNN_SRCS) $(wildcard tests/fakecudnn/*.h) tests/fakecuda/fakecuda.h runtime/cuda_abi.h
	@mkdir -p $(@D)
	$(say) LINK $@
	$(Q)$(CC) -shared $(CFLAGS_ALL) -fvisibility=hidden -Itests/fakecuda -Wl,-soname,libcudnn.so.9 $(FAKECUDNN_SRCS) \
	  $(LDFLAGS_ALL) -ldl -lpthread -lm -o $@
tests: $(FAKECUDNN)
# ---- end fakecudnn ----

# ---- cuBLAS double (tests/fakecublas) ----
# A test double of libcublas (the cuBLAS v2 API) for the fast mode's tests:
# it finds the loaded libcuda double and computes on its device memory, in
# stream order (tests/fakecublas/README.md). Only the cuBLAS entry points and
# the fakecublas_ test hooks are exported. Tests find it through
# $FAKECUBLAS_LIB (build-tools/run_tests.sh).
FAKECUBLAS := $(BUILD)/tests/fakecublas/libcublas.so.13
FAKECUBLAS_SRCS := $(filter-out tests/fakecublas/fakecublaslt.c,$(wildcard tests/fakecublas/*.c))
$(FAKECUBLAS): $(FAKECUBLAS_SRCS) $(wildcard tests/fakecublas/*.h) tests/fakecuda/fakecuda.h runtime/cuda_abi.h
	@mkdir -p $(@D)
	$(say) LINK $@
	$(Q)$(CC) -shared $(CFLAGS_ALL) -fvisibility=hidden -Itests -Wl,-soname,libcublas.so.13 $(FAKECUBLAS_SRCS) \
	  $(LDFLAGS_ALL) -ldl -lpthread -lm -o $@
tests: $(FAKECUBLAS)
$(BUILD)/tests/unit/test_fakecublas: tests/fakecublas/fakecublas.h
# The cuBLASLt double: the same files (the products, their checks and arithmetic) plus
# fakecublaslt.c, built with FCB_LT_DOUBLE so that it exports only cuBLASLt's entry points and
# the fakecublas_ hooks. Tests find it through $FAKECUBLASLT_LIB.
FAKECUBLASLT := $(BUILD)/tests/fakecublas/libcublasLt.so.13
$(FAKECUBLASLT): $(FAKECUBLAS_SRCS) tests/fakecublas/fakecublaslt.c $(wildcard tests/fakecublas/*.h) tests/fakecuda/fakecuda.h runtime/cuda_abi.h
	@mkdir -p $(@D)
	$(say) LINK $@
	$(Q)$(CC) -shared $(CFLAGS_ALL) -DFCB_LT_DOUBLE -fvisibility=hidden -Itests -Wl,-soname,libcublasLt.so.13 \
	  $(FAKECUBLAS_SRCS) tests/fakecublas/fakecublaslt.c $(LDFLAGS_ALL) -ldl -lpthread -lm -o $@
tests: $(FAKECUBLASLT)
# ---- end cuBLAS double ----

# ---- onnx ----
# The ONNX layer (onnx/): its reader decodes models and tensors with protobuf-c
# and goes into libember. The C code for onnx.proto (from libonnx-dev) is
# generated by protoc-c into $(GEN)/onnx/, never committed. The rule is a
# pattern so that it also makes build/gen/onnx/, which the fuzzers compile
# whatever BUILD is.
ONNX_PROTO_ROOT ?= /usr/include
PROTOC_C ?= protoc-c
ONNX_SRCS := $(wildcard onnx/*.c)
ONNX_READER_OBJS := $(patsubst %.c,$(BUILD)/obj/%.o,$(ONNX_SRCS))
ONNX_OBJS := $(ONNX_READER_OBJS) $(BUILD)/obj/gen/onnx/onnx.pb-c.o
LIBS += -lprotobuf-c
DEPFILES += $(ONNX_READER_OBJS:.o=.d)

%/gen/onnx/onnx.pb-c.c %/gen/onnx/onnx.pb-c.h: $(ONNX_PROTO_ROOT)/onnx/onnx.proto
	@mkdir -p $*/gen/onnx
	$(say) PROTOC $*/gen/onnx/onnx.pb-c.c
	$(Q)$(PROTOC_C) --proto_path=$(ONNX_PROTO_ROOT) --c_out=$*/gen onnx/onnx.proto

# The generated .c includes "onnx/onnx.pb-c.h": both compile with -I$(GEN).
$(ONNX_READER_OBJS): $(GEN)/onnx/onnx.pb-c.h
$(ONNX_READER_OBJS): LIB_CFLAGS += -I$(GEN)

$(BUILD)/obj/gen/onnx/onnx.pb-c.o: $(GEN)/onnx/onnx.pb-c.c $(GEN)/onnx/onnx.pb-c.h
	@mkdir -p $(@D)
	$(say) CC $<
	$(Q)$(CC) $(LIB_CFLAGS) -I$(GEN) -c $< -o $@

$(LIB_SO) $(LIB_A): $(ONNX_OBJS)
$(BUILD)/tests/unit/test_onnx_reader: GC_CFLAGS += -Ionnx
$(BUILD)/tests/unit/test_onnx_reader: onnx/onnx_reader.h
$(BUILD)/tests/unit/test_onnx_conformance: GC_CFLAGS += -Ionnx
$(BUILD)/tests/unit/test_onnx_conformance: onnx/onnx_import.h onnx/onnx_reader.h
# test_onnx_opset builds its models with the generated protobuf-c code (in libember).
$(BUILD)/tests/unit/test_onnx_opset: GC_CFLAGS += -Ionnx -I$(GEN)
$(BUILD)/tests/unit/test_onnx_opset: onnx/onnx_import.h onnx/onnx_reader.h $(GEN)/onnx/onnx.pb-c.h
# The public API's test reads the node tests' expected outputs with the
# internal tensor reader; so does test_cli, to check `ember run`'s .npy files.
$(BUILD)/tests/unit/test_onnx_api $(BUILD)/tests/unit/test_onnx_export $(BUILD)/tests/unit/test_cli: GC_CFLAGS += -Ionnx
$(BUILD)/tests/unit/test_onnx_api $(BUILD)/tests/unit/test_onnx_export $(BUILD)/tests/unit/test_cli: onnx/onnx_import.h onnx/onnx_reader.h
$(BUILD)/tests/unit/test_onnx_export: onnx/onnx_export.h
fuzz-run fuzz-long: build/gen/onnx/onnx.pb-c.c
# ---- end onnx ----

# ---- compiler sweeps (tests/toolchains/sweep.c) ----
# `make test-toolchains`: NVRTC 11.8 and 12.9 (.tools/) and the system's NVRTC
# compile every kernel source embedded in libember for every SM they offer,
# straight to cubins, through Ember's NVRTC loader; ptxas 11.8 and the
# system's assemble every committed PTX file for every target its .target
# allows. Each output is checked with the cubin reader. A cell of
# docs/nvrtc-sm.md that was ok and now fails or is no longer offered, an NVRTC
# file Ember's loader refuses, or any ptxas failure, fails the target (and
# tests/toolchains/sweep_selftest.sh shows the sweep failing on the first two);
# an absent toolchain is skipped with one line. `make nvrtc-table`
# rewrites docs/nvrtc-sm.md. Separate from tests/unit/: the sweeps take about
# a minute and a half on 2 cores and need no second run under sanitizers.
SWEEP := $(BUILD)/tests/toolchains/sweep
SWEEP_ARGS = --lib $(BUILD)/lib/libember.so $(foreach n,$(PYPI_NVRTC),--nvrtc $(n)) --nvrtc-system \
  --ptxas "$(or $(PTXAS_LEGACY),$(PYPI_PTXAS))" --ptxas "$(PTXAS)" --ptx-dir ptx --jobs 2 \
  --modules elementwise,reduce,transpose,math
$(SWEEP): tests/toolchains/sweep.c build-tools/nvrtc_module.c build-tools/nvrtc_module.h $(LIB_A) \
  $(wildcard runtime/*.h arch_table/*.h include/*.h include/ember/*.h)
	@mkdir -p $(@D)
	$(say) LINK $@
	$(Q)$(CC) $(CFLAGS_ALL) -Ibuild-tools $< build-tools/nvrtc_module.c $(LIB_A) $(LDFLAGS_ALL) $(LIBS) -o $@
.PHONY: test-toolchains nvrtc-table
test-toolchains: $(SWEEP) $(LIB_SO)
	@$(SWEEP) $(SWEEP_ARGS) --table docs/nvrtc-sm.md
	@bash tests/toolchains/sweep_selftest.sh $(SWEEP) $(BUILD)/lib/libember.so docs/nvrtc-sm.md $(PYPI_NVRTC)
nvrtc-table: $(SWEEP) $(LIB_SO)
	@$(SWEEP) $(SWEEP_ARGS) --write docs/nvrtc-sm.md --commit "$$(git describe --always --dirty 2>/dev/null || echo unknown)"
# ---- end compiler sweeps ----

# ------------------------------------------------------------------ targets ---
.PHONY: all lib tools tests deps test test-unit test-san test-valgrind test-nocuda test-install fuzz-run fuzz-long demo install clean test-gpu test-gpu-double gpu-bundle train-bundle zoo-models

# The GPU benchmarks are built with everything else so that a change to the
# API they use breaks the build here, not on a lent GPU machine.
all: lib tools tests $(BUILD)/bin/bench_gpu $(BUILD)/bin/bench_fast
lib: $(LIB_SO) $(LIB_A) $(BUILD)/lib/ember.pc
tools: $(BUILD)/bin/ember $(BUILD)/bin/gpucheck
tests: $(UNIT_BINS) $(FAKECUDA)

deps:
	@bash build-tools/deps.sh

# The ONNX model zoo of test_onnx_zoo (tests/onnx_zoo): PyTorch exports and
# onnxruntime's outputs, made once per kernel build folder (test-san and
# test-nocuda use the plain build's) and again when its scripts or models
# change. It installs onnx and onnxruntime (and torch, where PyTorch's index
# is reachable) into .tools/ when missing; without torch it uses the
# committed exports in tests/onnx_zoo/models; without onnxruntime (no
# network) it prints why and the test skips, printing it too.
ZOO ?= $(KBUILD)/onnx_zoo
ZOO_SOURCES := tests/onnx_zoo/make_zoo.py tests/onnx_zoo/zoo_models.py tests/onnx_zoo/zoo.sh \
  build-tools/pypi_python.sh tests/onnx_zoo/models/exports.txt
$(ZOO)/manifest.txt: $(ZOO_SOURCES)
	@bash tests/onnx_zoo/zoo.sh $(ZOO)

# Exports the zoo's models again into tests/onnx_zoo/models (commit them):
# after a change to tests/onnx_zoo/zoo_models.py, or for a newer torch.
zoo-models:
	@bash build-tools/pypi_python.sh onnx >&2 || { echo "make zoo-models needs onnx, onnxscript, onnxruntime (above)"; exit 1; }
	@bash build-tools/pypi_python.sh torch >&2 || { echo "make zoo-models needs torch (above)"; exit 1; }
	@rm -rf tests/onnx_zoo/models.new && mkdir -p tests/onnx_zoo/models.new $(BUILD)
	@PYTHONPATH=.tools/torch:.tools/onnxpy OMP_NUM_THREADS=1 python3 tests/onnx_zoo/make_zoo.py export \
	  tests/onnx_zoo/models.new >$(BUILD)/zoo-models.log 2>&1 || \
	  { tail -n 30 $(BUILD)/zoo-models.log; rm -rf tests/onnx_zoo/models.new; exit 1; }
	@rm -rf tests/onnx_zoo/models && mv tests/onnx_zoo/models.new tests/onnx_zoo/models
	@echo "tests/onnx_zoo/models: $$(head -n 1 tests/onnx_zoo/models/exports.txt); $$(grep -vc '^#' tests/onnx_zoo/models/exports.txt) models"

# Runs the built tests of $(BUILD) and prints one summary line.
test-unit: lib tools tests $(ZOO)/manifest.txt
	@EMBER_ONNX_ZOO=$(abspath $(ZOO)) bash build-tools/run_tests.sh $(BUILD)

# intercept_tls_get_addr=0: GCC 12's LeakSanitizer reads a garbage dynamic-TLS range of
# libdnnl.so.2's threads (loaded by ops/dnnl.c) and its tracer dies at exit ("Tracer caught
# signal 11", "DTLS ... at 0x0002000002a4-0x0026000013a6" with verbosity=1); not tracking
# __tls_get_addr avoids that, and leaks are still found through every other root.
SAN_ENV := ASAN_OPTIONS="$${ASAN_OPTIONS:+$$ASAN_OPTIONS:}intercept_tls_get_addr=0"
test-san:
	@$(SAN_ENV) $(MAKE) --no-print-directory BUILD=build/san KBUILD=$(BUILD) SAN=1 OPT="-O1 -g" test-unit

# The same tests under valgrind's memcheck (the plain build: valgrind and ASan
# do not mix). Any error, or a definite leak, fails the test binary.
VALGRIND := valgrind --quiet --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite \
  --suppressions=build-tools/valgrind.supp
test-valgrind: lib tools tests $(ZOO)/manifest.txt
	@EMBER_ONNX_ZOO=$(abspath $(ZOO)) bash build-tools/run_tests.sh $(BUILD) $(VALGRIND)

# The same tests on a build that had no CUDA compiler: only ptx/ is embedded.
test-nocuda:
	@bash build-tools/seed_build.sh $(BUILD) build/nocuda
	@$(MAKE) --no-print-directory BUILD=build/nocuda NVCC= NVCC_LEGACY= PTXAS= ZOO=$(ZOO) test-unit

test-install: lib tools
	@bash build-tools/test_install.sh $(BUILD)

# make test builds with one job per core unless told otherwise (make -jN test):
# CI runs a plain `make test` on a 2-core machine, and the kernel images (14
# modules, every SM, three compilers) are most of its time.
TEST_JOBS := $(if $(filter -j%,$(MAKEFLAGS)),,-j$(shell nproc 2>/dev/null || echo 1))
# Each phase prints how long it took (build-tools/phase.sh), so a slow CI run
# says where its time went.
PHASE := bash build-tools/phase.sh $(MAKE) --no-print-directory
test:
	@$(PHASE) $(TEST_JOBS) all
	@$(PHASE) check-ptx
	@$(PHASE) test-toolchains
	@$(PHASE) test-unit
	@$(PHASE) test-gpu-double
	@$(PHASE) $(TEST_JOBS) test-san
	@$(PHASE) test-valgrind
	@$(PHASE) $(TEST_JOBS) test-nocuda
	@$(PHASE) test-install
	@$(PHASE) fuzz-run

# fuzz_onnx_import compiles the whole library from its sources, with the
# generated files of build/ (the fuzzers' include path is build/gen).
fuzz-run fuzz-long: build/gen/arch_table_data.c build/gen/op_families.h
fuzz-run:
	@bash build-tools/fuzz.sh "$(CLANG)" build/fuzz

# Each target for up to 10 million inputs or 20 minutes (not part of make test).
fuzz-long:
	@bash build-tools/fuzz.sh "$(CLANG)" build/fuzz 10000000 1200

test-gpu: all
	@bash tests/gpu/run.sh $(BUILD)

# The same script against the test double of libcuda: a pretend H100 runs
# every kernel from its host build, every path forced in turn.
test-gpu-double: all
	@set -o pipefail; EMBER_LIBCUDA=$(abspath $(FAKECUDA)) FAKECUDA_DEVICES="9.0=NVIDIA H100 80GB HBM3 (test double)" \
	  FAKECUDA_DRIVER=13000 EMBER_GPU_RESULTS=$(BUILD)/gpu-paths-double.md EMBER_GPU_TESTS=0 bash tests/gpu/run.sh \
	  $(BUILD) | tail -n 2

# An archive of bin/ember, libember and the shared libraries they load, for a
# GPU machine without our Debian packages (tests/gpu/README.md).
gpu-bundle: lib tools tests $(BUILD)/bin/bench_gpu $(BUILD)/bin/bench_fast
	@bash build-tools/gpu_bundle.sh $(BUILD) .device

# What training on a lent GPU needs (tests/gpu/train_machine.sh): ember, its
# libraries and the Fashion-MNIST files, in .device/ember-train.tar.gz.
train-bundle: lib tools
	@bash build-tools/gpu_bundle.sh $(BUILD) .device train

# The GPU benchmarks (bench/run_gpu.sh), linked against the static library.
$(BUILD)/bin/bench_gpu: bench/bench_gpu.c bench/bench_common.h bench/mlp_graph.h $(LIB_A)
	@mkdir -p $(@D)
	$(say) LINK $@
	$(Q)$(CC) -std=c11 -O2 -Iinclude $< $(LIB_A) $(LDFLAGS_ALL) $(LIBS) -o $@

# The fast-mode GPU benchmarks of issue 13 (bench/run_fast.sh), linked against
# libember.so as bin/ember is: the bundle carries that library already, where a
# static copy would add ~5 MB of kernel images to it, and the start-up
# benchmark then times the loading an application linking libember pays.
$(BUILD)/bin/bench_fast: bench/bench_fast.c bench/bench_common.h $(LIB_SO)
	@mkdir -p $(@D)
	$(say) LINK $@
	$(Q)$(CC) -std=c11 -O2 -Wall -Wextra -Werror -Iinclude $< -L$(BUILD)/lib -lember -Wl,-rpath,'$$ORIGIN/../lib' \
	  $(LDFLAGS_ALL) -lm -o $@

# The demo installs what is missing first (build-tools/deps.sh: the
# Fashion-MNIST package too), then builds, then runs.
demo:
	@bash build-tools/deps.sh
	@$(MAKE) --no-print-directory all
	@bash build-tools/demo.sh $(BUILD)

install: lib tools
	install -d $(DESTDIR)$(PREFIX)/lib $(DESTDIR)$(PREFIX)/include/ember $(DESTDIR)$(PREFIX)/bin \
	  $(DESTDIR)$(PREFIX)/lib/pkgconfig
	install -m 0755 $(LIB_SO) $(DESTDIR)$(PREFIX)/lib/
	ln -sf libember.so.$(VERSION) $(DESTDIR)$(PREFIX)/lib/$(SONAME)
	ln -sf $(SONAME) $(DESTDIR)$(PREFIX)/lib/libember.so
	install -m 0644 $(LIB_A) $(DESTDIR)$(PREFIX)/lib/
	install -m 0644 include/ember.h $(DESTDIR)$(PREFIX)/include/
	install -m 0644 include/ember/*.h $(DESTDIR)$(PREFIX)/include/ember/
	install -m 0755 $(BUILD)/bin/ember $(BUILD)/bin/gpucheck $(DESTDIR)$(PREFIX)/bin/
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@VERSION@|$(VERSION)|g' build-tools/ember.pc.in \
	  > $(DESTDIR)$(PREFIX)/lib/pkgconfig/ember.pc

clean:
	rm -rf build

-include $(DEPFILES)
