# SPDX-License-Identifier: MIT
# ckptfs: one non-recursive Makefile.  `make help` lists the targets.

PKGS    := fuse3 msgpack libxxhash
SAN     ?=
V       ?= 0
PREFIX  ?= /usr/local
DESTDIR ?=

ifeq ($(SAN),)
O       ?= build
else
O       ?= build-san
endif

CC      ?= cc
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null)
WARN    := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes \
           -Wmissing-prototypes -Wwrite-strings -Wformat=2 -Wvla
CFLAGS  ?= -O2 -g
CFLAGS  += -std=gnu11 -D_GNU_SOURCE -D_FILE_OFFSET_BITS=64 $(WARN) \
           -MMD -MP $(PKG_CFLAGS)
LDLIBS  += $(PKG_LIBS) -lm
ifneq ($(SAN),)
CFLAGS  += -fsanitize=$(SAN) -fno-omit-frame-pointer -fno-sanitize-recover=all
LDFLAGS += -fsanitize=$(SAN)
endif

ifeq ($(V),1)
Q :=
else
Q := @
endif

CORE_SRC  := $(wildcard core/*.c)
FS_SRC    := $(wildcard fs/*.c)
MOUNT_SRC := $(wildcard mount/*.c)
UNIT_SRC  := $(wildcard tests/unit/test_*.c)

CORE_OBJ  := $(CORE_SRC:%.c=$(O)/%.o)
FS_OBJ    := $(FS_SRC:%.c=$(O)/%.o)
MOUNT_OBJ := $(MOUNT_SRC:%.c=$(O)/%.o)
UNIT_BIN  := $(UNIT_SRC:tests/unit/%.c=$(O)/tests/%)

BIN := $(O)/ckptfs
FUZZ_REPLAY := $(O)/tests/test_fuzz_replay
FUZZ_TORCH_REPLAY := $(O)/tests/test_fuzz_torch_replay
FUZZ_TIME ?= 60
FUZZ_CC ?= clang

.PHONY: all help deps check test unit bats demo install clean check-layers fuzz bench

all: $(BIN) $(UNIT_BIN) $(FUZZ_REPLAY) $(FUZZ_TORCH_REPLAY) $(O)/ceilfs

help:
	@echo "make            build $(BIN) and the unit tests"
	@echo "make demo       install what is missing, build, mount the demo checkpoint and show it"
	@echo "make check      install what is missing, build, run every test (plain and SAN=address,undefined)"
	@echo "make unit       run the C unit tests of core/"
	@echo "make bats       run the end-to-end tests through a real mount"
	@echo "make bench      throughput vs raw pread and a minimal FUSE ceiling (>= 2 GiB checkpoints; BENCH_ARGS=...)"
	@echo "make fuzz       libFuzzer (clang) on the metadata parser, validator and planner, and on the torch unpickler and zip locator, FUZZ_TIME=$(FUZZ_TIME) s each"
	@echo "make deps       install the Debian packages ckptfs needs (apt-get)"
	@echo "make install    install ckptfs into \$$DESTDIR\$$PREFIX/bin and ckptfs.py into /usr/bin/python3's site-packages"
	@echo "make clean      remove build outputs"
	@echo "Variables: SAN=address,undefined (sanitized build in build-san/), V=1 (show commands), O=DIR"

deps:
	$(Q)scripts/install-deps.sh

$(O)/%.o: %.c
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC    $<")
	$(Q)$(CC) $(CFLAGS) -c -o $@ $<

$(BIN): $(CORE_OBJ) $(FS_OBJ) $(MOUNT_OBJ)
	@$(if $(Q),echo "  LD    $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(O)/tests/test_%: tests/unit/test_%.c tests/unit/testhelp.h $(CORE_OBJ)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC    $@")
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< $(CORE_OBJ) $(LDLIBS)

$(FUZZ_REPLAY): tests/fuzz/fuzz_meta.c tests/fuzz/replay.c $(CORE_OBJ)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC    $@")
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) -o $@ tests/fuzz/fuzz_meta.c tests/fuzz/replay.c $(CORE_OBJ) $(LDLIBS)

$(FUZZ_TORCH_REPLAY): tests/fuzz/fuzz_torch.c tests/fuzz/replay.c $(CORE_OBJ)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC    $@")
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) -DCORPUS_DIR='"tests/fuzz/torch_corpus"' \
		-DCRASH_DIR='"tests/fuzz/torch_crashes"' -DNAME='"fuzz_torch_replay"' \
		-o $@ tests/fuzz/fuzz_torch.c tests/fuzz/replay.c $(CORE_OBJ) $(LDLIBS)

# libFuzzer builds of the same targets; new crashes land in
# tests/fuzz/crashes/ and tests/fuzz/torch_crashes/ (commit them: `make
# check` replays them).
build-fuzz/fuzz_%: tests/fuzz/fuzz_%.c $(CORE_SRC) $(wildcard core/*.h)
	@mkdir -p build-fuzz
	$(Q)$(FUZZ_CC) -std=gnu11 -D_GNU_SOURCE -D_FILE_OFFSET_BITS=64 -g -O1 \
		-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
		-o $@ $< $(CORE_SRC) -lxxhash -lpthread

fuzz: build-fuzz/fuzz_meta build-fuzz/fuzz_torch
	@mkdir -p build-fuzz/corpus build-fuzz/torch_corpus tests/fuzz/crashes tests/fuzz/torch_crashes
	$(Q)build-fuzz/fuzz_meta -max_total_time=$(FUZZ_TIME) -print_final_stats=1 \
		-artifact_prefix=tests/fuzz/crashes/ build-fuzz/corpus tests/fuzz/corpus
	$(Q)build-fuzz/fuzz_torch -max_total_time=$(FUZZ_TIME) -print_final_stats=1 \
		-artifact_prefix=tests/fuzz/torch_crashes/ build-fuzz/torch_corpus tests/fuzz/torch_corpus

$(O)/ceilfs: scripts/bench/ceilfs.c
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< $(LDLIBS)

# Throughput against baselines measured in the same run; not part of check.
bench: deps $(BIN) $(O)/ceilfs
	$(Q)command -v gnuplot >/dev/null || scripts/install-deps.sh gnuplot-nox
	$(Q)command -v xxh64sum >/dev/null || scripts/install-deps.sh xxhash
	$(Q)/usr/bin/python3 scripts/bench/bench.py --ckptfs $(abspath $(BIN)) \
		--ceilfs $(abspath $(O)/ceilfs) $(BENCH_ARGS)

# core/ must never depend on FUSE.
check-layers: $(CORE_OBJ)
	$(Q)if nm -u $(CORE_OBJ) | grep -q 'fuse_'; then \
		echo "core/ references FUSE symbols:"; nm -u $(CORE_OBJ) | grep fuse_; exit 1; fi
	$(Q)if grep -l '#include.*fuse' core/*.c core/*.h; then \
		echo "core/ includes a FUSE header"; exit 1; fi

unit: $(UNIT_BIN)
	$(Q)tests/run-unit.sh $(UNIT_BIN)

bats: $(BIN)
	$(Q)CKPTFS=$(abspath $(BIN)) bats tests/bats

# The README's test command.  Installs what is missing, builds plain and
# sanitized, runs unit + end-to-end suites under both, and ends with
# "N passed, N failed".
check: deps
	$(Q)$(MAKE) --no-print-directory all check-layers
	$(Q)$(MAKE) --no-print-directory SAN=address,undefined all
	$(Q)$(MAKE) --no-print-directory SAN=thread O=build-tsan build-tsan/ckptfs
	$(Q)tests/run-all.sh build build-san

test: check

demo: deps
	$(Q)$(MAKE) --no-print-directory all
	$(Q)scripts/demo.sh $(abspath $(BIN))

# The Python loader goes where /usr/bin/python3 imports from.
PYSITE ?= $(shell /usr/bin/python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' 2>/dev/null)

install: $(BIN)
	install -d $(DESTDIR)$(PREFIX)/bin
	install -m 0755 $(BIN) $(DESTDIR)$(PREFIX)/bin/ckptfs
	install -d $(DESTDIR)$(PREFIX)/share/man/man1
	install -m 0644 docs/ckptfs.1 $(DESTDIR)$(PREFIX)/share/man/man1/ckptfs.1
	install -d $(DESTDIR)$(PYSITE)
	install -m 0644 scripts/ckptfs.py $(DESTDIR)$(PYSITE)/ckptfs.py

clean:
	rm -rf build build-san build-tsan build-fuzz

-include $(wildcard $(O)/*/*.d $(O)/tests/*.d)
