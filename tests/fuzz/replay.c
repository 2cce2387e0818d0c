/* SPDX-License-Identifier: MIT */
/*
 * Replay driver for the fuzz target without libFuzzer (zstd's
 * regression_driver.c idea), run by `make check` under gcc + ASan/UBSan.
 * Replays every file of the corpus and of past crashes, then mutates each
 * corpus input deterministically: every cut point, byte flips, and lengths
 * and counts near 2^32 and 2^64 written over random places.
 *
 *     test_fuzz_replay [DIR|FILE ...]   (default tests/fuzz/corpus and
 *                                        tests/fuzz/crashes)
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#ifndef CORPUS_DIR
#define CORPUS_DIR "tests/fuzz/corpus"
#define CRASH_DIR "tests/fuzz/crashes"
#define NAME "fuzz_replay"
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static unsigned long runs;

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rnd(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

static void run(const uint8_t *d, size_t n)
{
	LLVMFuzzerTestOneInput(d, n);
	runs++;
}

static const uint8_t big[][9] = {
	{ 0xdd, 0xff, 0xff, 0xff, 0xff },	/* array of 2^32-1 */
	{ 0xdf, 0xff, 0xff, 0xff, 0xff },	/* map of 2^32-1 */
	{ 0xdb, 0xff, 0xff, 0xff, 0xfe },	/* str of 2^32-2 bytes */
	{ 0xcf, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff },  /* 2^64-1 */
	{ 0xcf, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00 },  /* 2^32 */
	{ 0xce, 0xff, 0xff, 0xff, 0xff },	/* 2^32-1 */
	{ 0xcf, 0x80, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00 },  /* 2^63 */
};

static void mutate(const uint8_t *d, size_t n)
{
	uint8_t *b = malloc(n + 16);
	size_t cut, step = n / 400 + 1, i, at;
	int k;

	for (cut = 16; cut < n; cut += step)
		run(d, cut);
	for (k = 0; k < 300; k++) {
		memcpy(b, d, n);
		for (i = 0; i < 1 + rnd() % 3; i++)
			b[16 + rnd() % (n - 16)] ^= (uint8_t)(1u << (rnd() % 8));
		run(b, n);
	}
	for (k = 0; k < 300; k++) {
		const uint8_t *v = big[rnd() % (sizeof(big) / sizeof(big[0]))];
		size_t vl = v[0] == 0xcf ? 9 : 5;

		memcpy(b, d, n);
		at = 16 + rnd() % (n - 16);
		if (at + vl > n)
			continue;
		memcpy(b + at, v, vl);
		run(b, n);
	}
	free(b);
}

static int replay_file(const char *path, int do_mutate)
{
	struct stat st;
	uint8_t *d;
	FILE *f;

	if (stat(path, &st) != 0 || !S_ISREG(st.st_mode))
		return 0;
	f = fopen(path, "rb");
	if (!f)
		return -1;
	d = malloc((size_t)st.st_size + 1);
	if (fread(d, 1, (size_t)st.st_size, f) != (size_t)st.st_size) {
		fclose(f);
		free(d);
		return -1;
	}
	fclose(f);
	run(d, (size_t)st.st_size);
	if (do_mutate && st.st_size > 32)
		mutate(d, (size_t)st.st_size);
	free(d);
	return 1;
}

static int replay(const char *path, int do_mutate)
{
	struct dirent *de;
	char full[4096];
	int n = 0, r;
	DIR *dir = opendir(path);

	if (!dir)
		return replay_file(path, do_mutate);
	while ((de = readdir(dir))) {
		if (de->d_name[0] == '.')
			continue;
		snprintf(full, sizeof(full), "%s/%s", path, de->d_name);
		r = replay_file(full, do_mutate);
		if (r < 0) {
			closedir(dir);
			return -1;
		}
		n += r;
	}
	closedir(dir);
	return n;
}

int main(int argc, char **argv)
{
	int i, n = 0, r;

	if (argc < 2) {
		r = replay(CORPUS_DIR, 1);
		if (r <= 0) {
			printf("not ok " NAME ": no corpus in " CORPUS_DIR "\n");
			printf("0 passed, 1 failed\n");
			return 1;
		}
		n += r;
		r = replay(CRASH_DIR, 0);
		n += r > 0 ? r : 0;
	} else {
		for (i = 1; i < argc; i++) {
			r = replay(argv[i], 1);
			n += r > 0 ? r : 0;
		}
	}
	printf("ok " NAME ": %d inputs, %lu runs (cuts, flips, 2^32/2^64 values) without a crash\n",
	       n, runs);
	printf("1 passed, 0 failed\n");
	return 0;
}
