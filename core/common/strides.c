/* SPDX-License-Identifier: MIT */
/* Element-stride arithmetic for strided records: see strides.h. */
#include "common/strides.h"

#include <errno.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

int ckpt_strided_span(const uint64_t *size, const uint64_t *stride,
		      unsigned ndim, uint64_t *elems)
{
	uint64_t span = 1, x;
	unsigned d;

	for (d = 0; d < ndim; d++) {
		if (size[d] == 0) {
			*elems = 0;
			return 0;
		}
	}
	for (d = 0; d < ndim; d++) {
		if (__builtin_mul_overflow(size[d] - 1, stride[d], &x) ||
		    __builtin_add_overflow(span, x, &span))
			return -EOVERFLOW;
	}
	*elems = span;
	return 0;
}

bool ckpt_strides_row_major(const uint64_t *size, const uint64_t *stride,
			    unsigned ndim)
{
	uint64_t expect = 1;
	unsigned d;

	for (d = 0; d < ndim; d++) {
		if (size[d] == 0)
			return true;	/* no element to address */
	}
	for (d = ndim; d-- > 0;) {
		if (size[d] != 1 && stride[d] != expect)
			return false;
		if (__builtin_mul_overflow(expect, size[d], &expect))
			return false;	/* more elements than fit: not a layout */
	}
	return true;
}

#define TILE 32		/* elements per side of a transposing tile */

/*
 * dst[i*dp + j*dq] = src[i*sp + j*sq] for i < ni, j < nj (element
 * strides), in TILE x TILE tiles.  SZ is a constant for the common
 * element sizes, so each memcpy is one load and one store (unaligned
 * buffers are fine).
 */
#define DEF_TILE(name, SZ)						\
static void name(char *dst, uint64_t dp, uint64_t dq, const char *src,	\
		 uint64_t sp, uint64_t sq, uint64_t ni, uint64_t nj,	\
		 size_t isz)						\
{									\
	uint64_t i0, j0, i, j, ie, je;					\
									\
	(void)isz;							\
	for (i0 = 0; i0 < ni; i0 += TILE) {				\
		ie = ni - i0 < TILE ? ni : i0 + TILE;			\
		for (j0 = 0; j0 < nj; j0 += TILE) {			\
			je = nj - j0 < TILE ? nj : j0 + TILE;		\
			for (i = i0; i < ie; i++)			\
				for (j = j0; j < je; j++)		\
					memcpy(dst + (i * dp + j * dq) * SZ, \
					       src + (i * sp + j * sq) * SZ, \
					       SZ);			\
		}							\
	}								\
}

DEF_TILE(tile1, 1)
DEF_TILE(tile2, 2)
DEF_TILE(tile4, 4)
DEF_TILE(tile8, 8)
DEF_TILE(tilen, isz)

#ifdef __SSE2__
/*
 * The transpose (src contiguous along i, dst along j:
 * dst[i*dp + j] = src[i + j*sq]) in SSE2 register blocks: B x B elements
 * loaded as B vectors along i and stored as B vectors along j, within
 * TILE x TILE tiles; the ragged edges go element by element.  Unpacks
 * move bits, so any dtype (NaN payloads included) is copied exactly.
 */
#define LD(p) _mm_loadu_si128((const __m128i *)(const void *)(p))
#define ST(p, v) _mm_storeu_si128((__m128i *)(void *)(p), (v))

static void block8(char *d, uint64_t dp, const char *s, uint64_t sq)
{	/* 2-byte elements, 8 x 8 */
	__m128i r0 = LD(s), r1 = LD(s + sq * 2), r2 = LD(s + 2 * sq * 2);
	__m128i r3 = LD(s + 3 * sq * 2), r4 = LD(s + 4 * sq * 2);
	__m128i r5 = LD(s + 5 * sq * 2), r6 = LD(s + 6 * sq * 2);
	__m128i r7 = LD(s + 7 * sq * 2);
	__m128i a0 = _mm_unpacklo_epi16(r0, r1), a1 = _mm_unpackhi_epi16(r0, r1);
	__m128i a2 = _mm_unpacklo_epi16(r2, r3), a3 = _mm_unpackhi_epi16(r2, r3);
	__m128i a4 = _mm_unpacklo_epi16(r4, r5), a5 = _mm_unpackhi_epi16(r4, r5);
	__m128i a6 = _mm_unpacklo_epi16(r6, r7), a7 = _mm_unpackhi_epi16(r6, r7);
	__m128i b0 = _mm_unpacklo_epi32(a0, a2), b1 = _mm_unpackhi_epi32(a0, a2);
	__m128i b2 = _mm_unpacklo_epi32(a1, a3), b3 = _mm_unpackhi_epi32(a1, a3);
	__m128i b4 = _mm_unpacklo_epi32(a4, a6), b5 = _mm_unpackhi_epi32(a4, a6);
	__m128i b6 = _mm_unpacklo_epi32(a5, a7), b7 = _mm_unpackhi_epi32(a5, a7);

	ST(d, _mm_unpacklo_epi64(b0, b4));
	ST(d + dp * 2, _mm_unpackhi_epi64(b0, b4));
	ST(d + 2 * dp * 2, _mm_unpacklo_epi64(b1, b5));
	ST(d + 3 * dp * 2, _mm_unpackhi_epi64(b1, b5));
	ST(d + 4 * dp * 2, _mm_unpacklo_epi64(b2, b6));
	ST(d + 5 * dp * 2, _mm_unpackhi_epi64(b2, b6));
	ST(d + 6 * dp * 2, _mm_unpacklo_epi64(b3, b7));
	ST(d + 7 * dp * 2, _mm_unpackhi_epi64(b3, b7));
}

static void block4(char *d, uint64_t dp, const char *s, uint64_t sq)
{	/* 4-byte elements, 4 x 4 */
	__m128i r0 = LD(s), r1 = LD(s + sq * 4), r2 = LD(s + 2 * sq * 4);
	__m128i r3 = LD(s + 3 * sq * 4);
	__m128i a0 = _mm_unpacklo_epi32(r0, r1), a1 = _mm_unpackhi_epi32(r0, r1);
	__m128i a2 = _mm_unpacklo_epi32(r2, r3), a3 = _mm_unpackhi_epi32(r2, r3);

	ST(d, _mm_unpacklo_epi64(a0, a2));
	ST(d + dp * 4, _mm_unpackhi_epi64(a0, a2));
	ST(d + 2 * dp * 4, _mm_unpacklo_epi64(a1, a3));
	ST(d + 3 * dp * 4, _mm_unpackhi_epi64(a1, a3));
}

static void block2(char *d, uint64_t dp, const char *s, uint64_t sq)
{	/* 8-byte elements, 2 x 2 */
	__m128i r0 = LD(s), r1 = LD(s + sq * 8);

	ST(d, _mm_unpacklo_epi64(r0, r1));
	ST(d + dp * 8, _mm_unpackhi_epi64(r0, r1));
}

static bool transpose_simd(char *dst, uint64_t dp, const char *src,
			   uint64_t sq, uint64_t ni, uint64_t nj, size_t isz)
{
	void (*blk)(char *, uint64_t, const char *, uint64_t);
	uint64_t i0, j0, i, j, ie, je, bi, bj;
	unsigned B;

	switch (isz) {
	case 2: blk = block8; B = 8; break;
	case 4: blk = block4; B = 4; break;
	case 8: blk = block2; B = 2; break;
	default: return false;
	}
	for (i0 = 0; i0 < ni; i0 += TILE) {
		ie = ni - i0 < TILE ? ni : i0 + TILE;
		bi = i0 + (ie - i0) / B * B;
		for (j0 = 0; j0 < nj; j0 += TILE) {
			je = nj - j0 < TILE ? nj : j0 + TILE;
			bj = j0 + (je - j0) / B * B;
			for (i = i0; i < bi; i += B)
				for (j = j0; j < bj; j += B)
					blk(dst + (i * dp + j) * isz, dp,
					    src + (i + j * sq) * isz, sq);
			for (i = i0; i < ie; i++)	/* ragged edges */
				for (j = i < bi ? bj : j0; j < je; j++)
					memcpy(dst + (i * dp + j) * isz,
					       src + (i + j * sq) * isz, isz);
		}
	}
	return true;
}
#else
static bool transpose_simd(char *dst, uint64_t dp, const char *src,
			   uint64_t sq, uint64_t ni, uint64_t nj, size_t isz)
{
	(void)dst, (void)dp, (void)src, (void)sq, (void)ni, (void)nj;
	(void)isz;
	return false;
}
#endif

void ckpt_strided_copy(void *dst, const uint64_t *dstride, const void *src,
		       const uint64_t *sstride, const uint64_t *size,
		       unsigned ndim, size_t isz)
{
	uint64_t sz[CKPT_MAX_DIMS], ss[CKPT_MAX_DIMS];
	uint64_t ds[CKPT_MAX_DIMS], idx[CKPT_MAX_DIMS] = { 0 };
	void (*tile)(char *, uint64_t, uint64_t, const char *, uint64_t,
		     uint64_t, uint64_t, uint64_t, size_t);
	uint64_t so = 0, dof = 0, ni = 1, sp = 0, dp = 0;
	unsigned n = 0, d, p, q;

	for (d = 0; d < ndim; d++) {
		if (size[d] == 0)
			return;
		if (size[d] == 1)
			continue;
		if (n && ss[n - 1] == sstride[d] * size[d] &&
		    ds[n - 1] == dstride[d] * size[d]) {
			sz[n - 1] *= size[d];	/* contiguous in both */
			ss[n - 1] = sstride[d];
			ds[n - 1] = dstride[d];
			continue;
		}
		sz[n] = size[d];
		ss[n] = sstride[d];
		ds[n] = dstride[d];
		n++;
	}
	if (n == 0) {
		memcpy(dst, src, isz);
		return;
	}
	/* q: the destination's innermost dim; p: of the others, the
	 * source's innermost, tiled against q when they differ. */
	q = 0;
	for (d = 1; d < n; d++)
		if (ds[d] < ds[q])
			q = d;
	p = n;
	for (d = 0; d < n; d++)
		if (d != q && (p == n || ss[d] < ss[p]))
			p = d;
	if (ss[q] == 1 && ds[q] == 1)
		p = n;	/* rows are contiguous on both sides: memcpy */
	if (p < n) {
		ni = sz[p];
		sp = ss[p];
		dp = ds[p];
	}
	switch (isz) {
	case 1: tile = tile1; break;
	case 2: tile = tile2; break;
	case 4: tile = tile4; break;
	case 8: tile = tile8; break;
	default: tile = tilen; break;
	}
	for (;;) {
		if (p == n && ss[q] == 1 && ds[q] == 1)
			memcpy((char *)dst + dof * isz,
			       (const char *)src + so * isz, sz[q] * isz);
		else if (!(sp == 1 && ds[q] == 1 &&
			   transpose_simd((char *)dst + dof * isz, dp,
					  (const char *)src + so * isz, ss[q],
					  ni, sz[q], isz)))
			tile((char *)dst + dof * isz, dp, ds[q],
			     (const char *)src + so * isz, sp, ss[q], ni, sz[q],
			     isz);
		for (d = n; d-- > 0;) {	/* the other dims, as an odometer */
			if (d == p || d == q)
				continue;
			if (++idx[d] < sz[d]) {
				so += ss[d];
				dof += ds[d];
				break;
			}
			so -= (idx[d] - 1) * ss[d];
			dof -= (idx[d] - 1) * ds[d];
			idx[d] = 0;
		}
		if (d == (unsigned)-1)
			return;
	}
}
