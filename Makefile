# SPDX-License-Identifier: MIT
# ckptfs: one non-recursive Makefile.  `make help` lists the targets.

PKGS    := fuse3 msgpack libxxhash libzstd libcurl
CORE_PKGS := msgpack libxxhash zlib libzstd libcurl
VERSION := 0.5.0
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
           -MMD -MP -fPIC -Icore $(PKG_CFLAGS) -DCKPT_LIB_VERSION='"$(VERSION)"'
CORE_LIBS := $(shell pkg-config --libs $(CORE_PKGS) 2>/dev/null) -lpthread -lm
LDLIBS  += $(PKG_LIBS) -lz -lm
ifneq ($(SAN),)
CFLAGS  += -fsanitize=$(SAN) -fno-omit-frame-pointer -fno-sanitize-recover=all
LDFLAGS += -fsanitize=$(SAN)
endif

ifeq ($(V),1)
Q :=
else
Q := @
endif

comma := ,
CORE_SRC  := $(wildcard core/*.c core/*/*.c)
FS_SRC    := $(wildcard fs/*.c)
MOUNT_SRC := $(wildcard mount/*.c)
UNIT_SRC  := $(wildcard tests/unit/test_*.c)

CORE_OBJ  := $(CORE_SRC:%.c=$(O)/%.o)
FS_OBJ    := $(FS_SRC:%.c=$(O)/%.o)
MOUNT_OBJ := $(MOUNT_SRC:%.c=$(O)/%.o)
UNIT_BIN  := $(UNIT_SRC:tests/unit/%.c=$(O)/tests/%)

BIN := $(O)/ckptfs
LIB_A  := $(O)/libckptfs.a
LIB_SO := $(O)/libckptfs.so
EXAMPLE := $(O)/ckptfs-example
FUZZ_REPLAY := $(O)/tests/test_fuzz_replay
FUZZ_TORCH_REPLAY := $(O)/tests/test_fuzz_torch_replay
FUZZ_ST_REPLAY := $(O)/tests/test_fuzz_safetensors_replay
FUZZ_ZSTD_REPLAY := $(O)/tests/test_fuzz_zstd_replay
S3_CHECK := $(O)/tests/s3_check
FUZZ_TIME ?= 60
FUZZ_CC ?= clang

.PHONY: all help deps deps-demo check check-build check-all test unit bats demo install clean check-layers fuzz bench sid-chroot tsan \
	bookworm-chroot deb wheel

all: $(LIB_A) $(LIB_SO) $(BIN) $(UNIT_BIN) $(FUZZ_REPLAY) $(FUZZ_TORCH_REPLAY) $(FUZZ_ST_REPLAY) $(FUZZ_ZSTD_REPLAY) $(S3_CHECK) $(O)/ceilfs $(EXAMPLE)

help:
	@echo "make            build $(BIN) and the unit tests"
	@echo "make demo       install what is missing, build, mount the demo checkpoint and show it"
	@echo "make check      install what is missing, build, run every test on the plain build (about 30 min)"
	@echo "make check-all  make check, then every test again under ASan/UBSan, valgrind and ThreadSanitizer (CI's)"
	@echo "make unit       run the C unit tests of core/"
	@echo "make bats       run the end-to-end tests through a real mount"
	@echo "make tsan       the ThreadSanitizer build in build-tsan/ (daemon, library, threaded unit tests) for tests/tsan-stress.sh and tests/tsan-s3.sh"
	@echo "make bench      throughput vs raw pread and a minimal FUSE ceiling (>= 2 GiB checkpoints; BENCH_ARGS=...), and the open of 15k items vs torch's read_metadata (SCALE_ARGS=...)"
	@echo "make fuzz       libFuzzer (clang) on the metadata parser, validator and planner, and on the torch unpickler and zip locator, FUZZ_TIME=$(FUZZ_TIME) s each"
	@echo "make deps       install the Debian packages ckptfs needs to build and test (apt-get)"
	@echo "make deb        Debian packages ckptfs, libckptfs0, libckptfs-dev, python3-ckptfs in build/deb/ (lintian-checked)"
	@echo "make wheel      a wheel with libckptfs and the ckptfs command in build/wheel/"
	@echo "make bookworm-chroot  build (once) or reuse the Debian 12 chroot the packages are tested in, cached in /var/cache/ckptfs/bookworm"
	@echo "make sid-chroot build (once) or reuse the Debian sid chroot with the newest PyTorch, cached in /var/cache/ckptfs/sid"
	@echo "make install    install ckptfs, libckptfs (.a, .so, ckptfs.h, ckptfs.pc) into \$$DESTDIR\$$PREFIX, and the ckptfs Python package into /usr/bin/python3's site-packages"
	@echo "make check-layers  libckptfs's folder order, no cycles, no FUSE in core/, public header only outside it"
	@echo "make clean      remove build outputs"
	@echo "Variables: SAN=address,undefined (sanitized build in build-san/), V=1 (show commands), O=DIR"

deps:
	$(Q)scripts/install-deps.sh

deps-demo:
	$(Q)scripts/install-deps.sh --demo

$(O)/%.o: %.c
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC    $<")
	$(Q)$(CC) $(CFLAGS) -c -o $@ $<

# libckptfs: core/ as a static and a shared library.  The shared one
# exports exactly the functions of the public header, core/ckptfs.h.
$(LIB_A): $(CORE_OBJ)
	@$(if $(Q),echo "  AR    $@")
	$(Q)rm -f $@ && ar rcs $@ $^

$(O)/libckptfs.map: core/ckptfs.h
	@mkdir -p $(dir $@)
	$(Q){ echo "CKPTFS_0 {"; echo "global:"; \
	  sed -n 's/^[a-z].*[ *]\(ckpt_[a-z0-9_]*\)(.*/\1;/p' $< | sort -u; \
	  echo "local: *;"; echo "};"; } > $@

$(LIB_SO): $(CORE_OBJ) $(O)/libckptfs.map
	@$(if $(Q),echo "  LD    $@")
	$(Q)$(CC) $(LDFLAGS) -shared -Wl,-soname,libckptfs.so.0 \
		-Wl,--version-script=$(O)/libckptfs.map -o $@ $(CORE_OBJ) $(CORE_LIBS) -lz

$(BIN): $(FS_OBJ) $(MOUNT_OBJ) $(LIB_A)
	@$(if $(Q),echo "  LD    $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $(FS_OBJ) $(MOUNT_OBJ) $(LIB_A) $(LDLIBS)

# The library example in docs/: the public header and the library alone.
$(EXAMPLE): docs/example.c core/ckptfs.h $(LIB_A)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC    $@")
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< $(LIB_A) $(CORE_LIBS) -lz

# Unit tests may wrap libc calls to inject faults: a "// wrap: NAME ..."
# line in the test names them.
$(O)/tests/test_%: tests/unit/test_%.c tests/unit/testhelp.h $(CORE_OBJ)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC    $@")
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) $(patsubst %,-Wl$(comma)--wrap=%,$(shell sed -n 's|^// wrap: ||p' $<)) \
		-o $@ $< $(CORE_OBJ) $(LDLIBS)

# The S3 store against a real radosgw: run by tests/bats/s3.bats, which
# starts the server (not named test_*: it needs one).
$(S3_CHECK): tests/unit/s3_check.c tests/unit/testhelp.h $(CORE_OBJ)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC    $@")
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< $(CORE_OBJ) $(LDLIBS)

$(FUZZ_REPLAY): tests/fuzz/fuzz_meta.c tests/fuzz/replay.c $(CORE_OBJ)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC    $@")
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) -o $@ tests/fuzz/fuzz_meta.c tests/fuzz/replay.c $(CORE_OBJ) $(LDLIBS)

$(FUZZ_TORCH_REPLAY): tests/unit/fuzz_torch.c tests/fuzz/replay.c $(CORE_OBJ)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC    $@")
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) -DCORPUS_DIR='"tests/fuzz/torch_corpus"' \
		-DCRASH_DIR='"tests/fuzz/torch_crashes"' -DNAME='"fuzz_torch_replay"' \
		-o $@ tests/unit/fuzz_torch.c tests/fuzz/replay.c $(CORE_OBJ) $(LDLIBS)

$(FUZZ_ST_REPLAY): tests/fuzz/fuzz_safetensors.c tests/fuzz/fuzz_common.h tests/fuzz/replay.c $(CORE_OBJ)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC    $@")
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) -DCORPUS_DIR='"tests/fuzz/st_corpus"' \
		-DCRASH_DIR='"tests/fuzz/st_crashes"' -DNAME='"fuzz_safetensors_replay"' \
		-o $@ tests/fuzz/fuzz_safetensors.c tests/fuzz/replay.c $(CORE_OBJ) $(LDLIBS)

$(FUZZ_ZSTD_REPLAY): tests/fuzz/fuzz_zstd.c tests/fuzz/fuzz_common.h tests/fuzz/replay.c $(CORE_OBJ)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC    $@")
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) -DCORPUS_DIR='"tests/fuzz/zstd_corpus"' \
		-DCRASH_DIR='"tests/fuzz/zstd_crashes"' -DNAME='"fuzz_zstd_replay"' \
		-o $@ tests/fuzz/fuzz_zstd.c tests/fuzz/replay.c $(CORE_OBJ) $(LDLIBS)

# libFuzzer builds of the same targets; new crashes land in
# tests/fuzz/crashes/ and tests/fuzz/torch_crashes/ (commit them: `make
# check` replays them).
# fuzz_meta goes through the public API; fuzz_torch is white-box (the
# unpickler and zip locator), so it lives with the unit tests.
build-fuzz/fuzz_meta: tests/fuzz/fuzz_meta.c
build-fuzz/fuzz_safetensors: tests/fuzz/fuzz_safetensors.c
build-fuzz/fuzz_zstd: tests/fuzz/fuzz_zstd.c
build-fuzz/fuzz_torch: tests/unit/fuzz_torch.c
build-fuzz/fuzz_%: $(CORE_SRC) $(wildcard core/*.h core/*/*.h)
	@mkdir -p build-fuzz
	$(Q)$(FUZZ_CC) -std=gnu11 -D_GNU_SOURCE -D_FILE_OFFSET_BITS=64 -g -O1 -Icore \
		-DCKPT_LIB_VERSION='"$(VERSION)"' \
		-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
		-o $@ $(filter %/fuzz_$*.c,$^) $(CORE_SRC) -lxxhash -lz -lzstd -lcurl -lpthread

fuzz: build-fuzz/fuzz_meta build-fuzz/fuzz_torch build-fuzz/fuzz_safetensors build-fuzz/fuzz_zstd
	@mkdir -p build-fuzz/corpus build-fuzz/torch_corpus build-fuzz/st_corpus build-fuzz/zstd_corpus tests/fuzz/crashes tests/fuzz/torch_crashes tests/fuzz/st_crashes tests/fuzz/zstd_crashes
	$(Q)build-fuzz/fuzz_meta -max_total_time=$(FUZZ_TIME) -print_final_stats=1 \
		-artifact_prefix=tests/fuzz/crashes/ build-fuzz/corpus tests/fuzz/corpus
	$(Q)build-fuzz/fuzz_torch -max_total_time=$(FUZZ_TIME) -print_final_stats=1 \
		-artifact_prefix=tests/fuzz/torch_crashes/ build-fuzz/torch_corpus tests/fuzz/torch_corpus
	$(Q)build-fuzz/fuzz_safetensors -max_total_time=$(FUZZ_TIME) -print_final_stats=1 \
		-artifact_prefix=tests/fuzz/st_crashes/ build-fuzz/st_corpus tests/fuzz/st_corpus
	$(Q)build-fuzz/fuzz_zstd -max_total_time=$(FUZZ_TIME) -print_final_stats=1 \
		-artifact_prefix=tests/fuzz/zstd_crashes/ build-fuzz/zstd_corpus tests/fuzz/zstd_corpus

$(O)/ceilfs: scripts/bench/ceilfs.c
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< $(LDLIBS)

# Throughput against baselines measured in the same run; not part of check.
bench: deps $(BIN) $(O)/ceilfs
	$(Q)command -v gnuplot >/dev/null || scripts/install-deps.sh gnuplot-nox
	$(Q)command -v fio >/dev/null || scripts/install-deps.sh fio
	$(Q)command -v xxh64sum >/dev/null || scripts/install-deps.sh xxhash
	$(Q)/usr/bin/python3 scripts/bench/bench.py --ckptfs $(abspath $(BIN)) \
		--ceilfs $(abspath $(O)/ceilfs) $(BENCH_ARGS)
	$(Q)/usr/bin/python3 scripts/bench/scale.py --ckptfs $(abspath $(BIN)) \
		$(SCALE_ARGS)

# libckptfs's folders depend one way, with no cycle; core/ never touches
# FUSE; programs use only core/ckptfs.h; the shared library exports it all.
check-layers: $(CORE_OBJ) $(LIB_SO)
	$(Q)scripts/check-layers.sh $(CORE_OBJ)
	$(Q)missing=$$(sed -n 's/^[a-z].*[ *]\(ckpt_[a-z0-9_]*\)(.*/\1/p' core/ckptfs.h | sort -u | \
		while read f; do nm -D --defined-only $(LIB_SO) | grep -qw "$$f" || echo "$$f"; done); \
	  if [ -n "$$missing" ]; then echo "libckptfs.so lacks: $$missing"; exit 1; fi

unit: $(UNIT_BIN)
	$(Q)tests/run-unit.sh $(UNIT_BIN)

bats: $(BIN)
	$(Q)CKPTFS=$(abspath $(BIN)) bats tests/bats

# The README's test command.  Installs what is missing, builds plain and
# sanitized, runs unit + end-to-end suites under both, and ends with
# "N passed, N failed".
# The newest PyTorch for the tests (tests/bats/torch2.bats).
sid-chroot:
	$(Q)scripts/sid-chroot.sh build

bookworm-chroot:
	$(Q)scripts/bookworm-chroot.sh build

# The builds use every core (make -j, unless MAKEFLAGS already says).
JOBS := $(if $(findstring -j,$(MAKEFLAGS)),,-j$(shell nproc 2>/dev/null || echo 2))
# make check: every suite on the plain build (what a newcomer runs, about
# 30 min on a fresh 2-core machine).  make check-all (.ci/run): the same,
# then again on the sanitized build (ASan/UBSan), with valgrind on the
# unit tests and the ThreadSanitizer jobs.
check-build: deps
	$(Q)$(MAKE) --no-print-directory $(JOBS) all check-layers
	$(Q)$(MAKE) --no-print-directory sid-chroot
	$(Q)$(MAKE) --no-print-directory bookworm-chroot
	$(Q)$(MAKE) --no-print-directory deb wheel

check: check-build
	$(Q)tests/run-all.sh build

check-all: check-build
	$(Q)$(MAKE) --no-print-directory $(JOBS) SAN=address,undefined all
	$(Q)$(MAKE) --no-print-directory $(JOBS) tsan
	$(Q)tests/run-all.sh --all build build-san

test: check

# The ThreadSanitizer build that tests/tsan-stress.sh and tests/tsan-s3.sh
# run: the daemon, the library (for Python) and the threaded unit tests.
TSAN_TARGETS := build-tsan/ckptfs build-tsan/libckptfs.so \
	build-tsan/tests/test_s3_creds build-tsan/tests/test_readahead
tsan:
	$(Q)$(MAKE) --no-print-directory SAN=thread O=build-tsan $(TSAN_TARGETS)

demo: deps-demo
	$(Q)$(MAKE) --no-print-directory all
	$(Q)scripts/demo.sh $(abspath $(BIN))

# Debian packages (scripts/debian/, staged into build/deb/src/), built
# with the tools installed only when missing.
DEB_TOOLS := debhelper devscripts lintian dh-python fakeroot build-essential \
	pkg-config libfuse3-dev libmsgpack-dev libxxhash-dev zlib1g-dev \
	libzstd-dev libcurl4-openssl-dev
deb:
	$(Q)scripts/install-deps.sh $(DEB_TOOLS)
	$(Q)scripts/build-deb.sh $(VERSION)

# A wheel (py3-none-manylinux_2_XX_ARCH) with libckptfs.so.0 and the
# ckptfs command inside, written by scripts/build-wheel.py.
wheel: $(BIN) $(LIB_SO)
	$(Q)/usr/bin/python3 scripts/build-wheel.py --version $(VERSION) \
		--lib $(LIB_SO) --bin $(BIN) --out $(O)/wheel

# The Python package goes where /usr/bin/python3 imports from, its
# libckptfs.so.0 a link to the one installed above (in a virtual
# environment: pip install --no-build-isolation scripts/).
PY_PKG := $(wildcard scripts/ckptfs/*.py) scripts/ckptfs/py.typed
PYSITE ?= $(shell /usr/bin/python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' 2>/dev/null)

LIBDIR ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include

install: $(BIN) $(LIB_A) $(LIB_SO)
	install -d $(DESTDIR)$(PREFIX)/bin
	install -m 0755 $(BIN) $(DESTDIR)$(PREFIX)/bin/ckptfs
	install -d $(DESTDIR)$(LIBDIR)/pkgconfig $(DESTDIR)$(INCLUDEDIR)
	install -m 0644 $(LIB_A) $(DESTDIR)$(LIBDIR)/libckptfs.a
	install -m 0755 $(LIB_SO) $(DESTDIR)$(LIBDIR)/libckptfs.so.0
	ln -sf libckptfs.so.0 $(DESTDIR)$(LIBDIR)/libckptfs.so
	install -m 0644 core/ckptfs.h $(DESTDIR)$(INCLUDEDIR)/ckptfs.h
	sed -e 's|@PREFIX@|$(PREFIX)|; s|@LIBDIR@|$(LIBDIR)|; s|@INCLUDEDIR@|$(INCLUDEDIR)|; s|@VERSION@|$(VERSION)|' \
		core/ckptfs.pc.in > $(DESTDIR)$(LIBDIR)/pkgconfig/ckptfs.pc
	install -d $(DESTDIR)$(PREFIX)/share/man/man1
	install -m 0644 docs/ckptfs.1 $(DESTDIR)$(PREFIX)/share/man/man1/ckptfs.1
	install -d $(DESTDIR)$(PYSITE)/ckptfs
	install -m 0644 $(PY_PKG) $(DESTDIR)$(PYSITE)/ckptfs/
	ln -sfn $(LIBDIR)/libckptfs.so.0 $(DESTDIR)$(PYSITE)/ckptfs/libckptfs.so.0

clean:
	rm -rf build build-san build-tsan build-fuzz

-include $(wildcard $(O)/*.d $(O)/*/*.d $(O)/*/*/*.d $(O)/tests/*.d)
