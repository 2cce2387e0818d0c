/* SPDX-License-Identifier: MIT */
/*
 * Element conversion for dtype views.  Every source type but float64 is
 * exact in float32, so float16, bfloat16 and both float8 kinds decode
 * exactly to float32 and, for bfloat16 targets, round once from there.
 * float64 rounds once, straight to the target (no double rounding through
 * float32).
 */
#include "view/convert.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

bool ckpt_convert_is_target(enum ckpt_dtype dt)
{
	return dt == CKPT_F32 || dt == CKPT_BF16;
}

enum ckpt_dtype ckpt_convert_view_dtype(enum ckpt_dtype src,
					enum ckpt_dtype target)
{
	if (target >= CKPT_DTYPE_COUNT || !ckpt_dtype_is_float(src))
		return src;
	return target;
}

static float from_bits(uint32_t b)
{
	float f;

	memcpy(&f, &b, 4);
	return f;
}

static float f16_to_f32(uint16_t h)
{
	uint32_t s = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f;
	uint32_t m = h & 0x3ff;

	if (e == 0) {	/* zero or subnormal: m * 2^-24 */
		float v = ldexpf((float)m, -24);

		return s ? -v : v;
	}
	if (e == 31)	/* Inf, or NaN with its payload */
		return from_bits(s | 0x7f800000u | (m << 13));
	return from_bits(s | ((e + 112) << 23) | (m << 13));
}

/* float8 e4m3fn: bias 7, no infinities, S.1111.111 is NaN. */
static float e4m3_to_f32(uint8_t b)
{
	unsigned e = (b >> 3) & 0xf, m = b & 7;
	float v;

	if (e == 15 && m == 7)
		return from_bits((b & 0x80 ? 0x80000000u : 0) | 0x7fc00000u);
	if (e == 0)
		v = ldexpf((float)m, -9);
	else
		v = ldexpf(1.0f + (float)m / 8.0f, (int)e - 7);
	return (b & 0x80) ? -v : v;
}

/* float8 e5m2 is the top byte of a float16. */
static float e5m2_to_f32(uint8_t b)
{
	return f16_to_f32((uint16_t)(b << 8));
}

/* Round x to bfloat16, nearest even: 8 significant bits at x's binade,
 * or the fixed subnormal step 2^-133 below 2^-126. */
static uint16_t bf16_from_double(double x)
{
	uint16_t sign = signbit(x) ? 0x8000 : 0;
	double a = fabs(x), q, r;
	uint32_t fb;
	float f;
	int e;

	if (isnan(x))
		return sign | 0x7fc0;
	if (isinf(a))
		return sign | 0x7f80;
	if (a >= 0x1p-126) {
		frexp(a, &e);
		q = ldexp(1.0, e - 8);
	} else {
		q = 0x1p-133;
	}
	r = nearbyint(a / q) * q;	/* exact scaling; RNE rounding */
	if (r >= 0x1p128)
		return sign | 0x7f80;
	f = (float)r;			/* exact: r has <= 8 significant bits */
	memcpy(&fb, &f, 4);
	return sign | (uint16_t)(fb >> 16);
}

static double load(enum ckpt_dtype src, const uint8_t *p)
{
	uint16_t h;
	uint32_t w;
	double d;
	float f;

	switch (src) {
	case CKPT_F64:
		memcpy(&d, p, 8);
		return d;
	case CKPT_F32:
		memcpy(&f, p, 4);
		return f;
	case CKPT_F16:
		memcpy(&h, p, 2);
		return f16_to_f32(h);
	case CKPT_BF16:
		memcpy(&h, p, 2);
		w = (uint32_t)h << 16;
		return from_bits(w);
	case CKPT_F8E4M3:
		return e4m3_to_f32(*p);
	case CKPT_F8E5M2:
		return e5m2_to_f32(*p);
	default:
		return 0;
	}
}

void ckpt_convert_to_double(enum ckpt_dtype src, const void *in, double *out,
			    size_t n)
{
	const uint8_t *ip = in;
	unsigned isz = ckpt_dtype_size(src);
	size_t i;

	for (i = 0; i < n; i++, ip += isz) {
		int64_t i64;
		int32_t i32;
		int16_t i16;

		switch (src) {
		case CKPT_I64:
			memcpy(&i64, ip, 8);
			out[i] = (double)i64;
			break;
		case CKPT_I32:
			memcpy(&i32, ip, 4);
			out[i] = i32;
			break;
		case CKPT_I16:
			memcpy(&i16, ip, 2);
			out[i] = i16;
			break;
		case CKPT_I8:
			out[i] = (int8_t)*ip;
			break;
		case CKPT_U8:
			out[i] = *ip;
			break;
		case CKPT_BOOL:
			out[i] = *ip != 0;
			break;
		default:
			out[i] = load(src, ip);
		}
	}
}

void ckpt_convert(enum ckpt_dtype src, enum ckpt_dtype dst, const void *in,
		  void *out, size_t n)
{
	const uint8_t *ip = in;
	uint8_t *op = out;
	unsigned isz = ckpt_dtype_size(src);
	size_t i;

	for (i = 0; i < n; i++, ip += isz) {
		double v = load(src, ip);

		if (dst == CKPT_F32) {
			/* float64 rounds here (RNE, Inf on overflow); every
			 * other source is exact. */
			float f = (float)v;

			memcpy(op + 4 * i, &f, 4);
		} else {
			uint16_t h = bf16_from_double(v);

			memcpy(op + 2 * i, &h, 2);
		}
	}
}
