/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of the read-ahead window policy (core/view/readahead.c):
 * an in-order reader of a file, whatever its request size, is served
 * every byte once and reads at most twice what it was served at any
 * point (exactly once to the end); windows grow and stop at the cap and
 * the file's end; a reader that jumps reads directly; re-reads inside
 * the window hit it.
 */
#include <string.h>

#include "view/readahead.h"
#include "testhelp.h"

/* Read [0, size) in requests of len; check the bound after each. */
static void in_order(uint64_t size, uint64_t len, uint64_t max)
{
	struct ckpt_ra_stream st = { .next = UINT64_MAX };
	uint64_t off, served = 0, read = 0, wlen, fills = 0, biggest = 0;
	enum ckpt_ra_action a;

	for (off = 0; off < size; off += len) {
		uint64_t n = size - off < len ? size - off : len;

		a = ckpt_ra_decide(&st, off, n, size, max, &wlen);
		if (a == CKPT_RA_FILL) {
			CHECK(wlen >= n && wlen <= max && off + wlen <= size);
			st.buf = (char *)&st;	/* any non-NULL window */
			st.boff = off;
			st.blen = wlen;
			read += wlen;
			fills++;
			biggest = wlen > biggest ? wlen : biggest;
		} else if (a == CKPT_RA_DIRECT) {
			read += n;
		} else {
			CHECK(off >= st.boff && off + n <= st.boff + st.blen);
		}
		served += n;
		CHECK(read <= 2 * served);
	}
	CHECK(read == size);		/* to the end: every byte once */
	CHECK(biggest <= max);
	if (size >= 8 * len && max >= 4 * len)
		CHECK(fills > 0 && biggest > 2 * len);
}

static void test_in_order(void)
{
	static const uint64_t sizes[] = { 1, 4096, 1000000, 16 << 20,
					  (16 << 20) + 12345 };
	static const uint64_t lens[] = { 1, 4096, 131072, 1 << 20, 999 };
	unsigned i, k;

	for (i = 0; i < 5; i++)
		for (k = 0; k < 5; k++) {
			in_order(sizes[i], lens[k], 8 << 20);
			in_order(sizes[i], lens[k], 1 << 20);
		}
}

/* A jump restarts: read directly, no window; a re-read inside the
 * window is a hit and does not move it. */
static void test_jumps_and_hits(void)
{
	struct ckpt_ra_stream st = { .next = UINT64_MAX };
	uint64_t wlen = 0, size = 64 << 20, len = 1 << 20;

	CHECK(ckpt_ra_decide(&st, 0, len, size, 8 << 20, &wlen) ==
	      CKPT_RA_DIRECT);
	CHECK(ckpt_ra_decide(&st, len, len, size, 8 << 20, &wlen) ==
	      CKPT_RA_FILL && wlen == 2 * len);
	st.buf = (char *)&st;
	st.boff = len;
	st.blen = wlen;
	CHECK(ckpt_ra_decide(&st, 2 * len, len, size, 8 << 20, &wlen) ==
	      CKPT_RA_HIT);
	CHECK(ckpt_ra_decide(&st, len, 4096, size, 8 << 20, &wlen) ==
	      CKPT_RA_HIT);
	/* a jump past the window: direct, and the next in-order read
	 * counts only from the jump */
	CHECK(ckpt_ra_decide(&st, 40 << 20, len, size, 8 << 20, &wlen) ==
	      CKPT_RA_DIRECT);
	CHECK(ckpt_ra_decide(&st, (40 << 20) + len, len, size, 8 << 20,
			     &wlen) == CKPT_RA_FILL && wlen == 2 * len);
	/* a request as big as the cap: direct */
	st.buf = NULL;
	CHECK(ckpt_ra_decide(&st, (40 << 20) + 2 * len, 8 << 20, size,
			     8 << 20, &wlen) == CKPT_RA_DIRECT);
}

int main(void)
{
	TEST(test_in_order);
	TEST(test_jumps_and_hits);
	return TEST_REPORT();
}
