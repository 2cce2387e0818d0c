/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of dtype conversion (view/convert.c) on hand-computed bit
 * patterns: bfloat16 round-to-nearest-even (ties, carries into the
 * exponent, overflow, NaN), float64 rounded once, float16 and float8
 * decoding, and the decode to double used by `ckptfs stats`.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "testhelp.h"
#include "view/convert.h"

static uint16_t f32_to_bf16(uint32_t bits)
{
	uint16_t out;
	float f;

	memcpy(&f, &bits, 4);
	ckpt_convert(CKPT_F32, CKPT_BF16, &f, &out, 1);
	return out;
}

static void test_bf16_rounding(void)
{
	CHECK(f32_to_bf16(0x3f800000) == 0x3f80);	/* 1.0 */
	CHECK(f32_to_bf16(0x3f808000) == 0x3f80);	/* tie: to even */
	CHECK(f32_to_bf16(0x3f818000) == 0x3f82);	/* tie: to even (up) */
	CHECK(f32_to_bf16(0x3f808001) == 0x3f81);	/* above the tie */
	CHECK(f32_to_bf16(0x3f7fffff) == 0x3f80);	/* carries to 1.0 */
	CHECK(f32_to_bf16(0x7f7fffff) == 0x7f80);	/* FLT_MAX: to Inf */
	CHECK(f32_to_bf16(0xff800000) == 0xff80);	/* -Inf */
	CHECK(f32_to_bf16(0x80000000) == 0x8000);	/* -0 */
	CHECK((f32_to_bf16(0x7fc00001) & 0x7fc0) == 0x7fc0);	/* NaN stays */
	CHECK(f32_to_bf16(0x00000001) == 0x0000);	/* tiny subnormal */
}

static void test_f64_once(void)
{
	/* 1 + 2^-8 + 2^-30: just above a bfloat16 tie.  Through float32 it
	 * would round to the tie (1 + 2^-8) and then to even (1.0). */
	double x = 1.0 + ldexp(1, -8) + ldexp(1, -30), big = 1e300;
	uint16_t b;
	float f;

	ckpt_convert(CKPT_F64, CKPT_BF16, &x, &b, 1);
	CHECK(b == 0x3f81);
	ckpt_convert(CKPT_F64, CKPT_F32, &big, &f, 1);
	CHECK(isinf(f) && f > 0);
}

static void test_decode(void)
{
	uint16_t h[4] = { 0x3c00, 0x7c00, 0x0001, 0xc000 };	/* f16 */
	uint8_t e4[3] = { 0x38, 0x7f, 0x01 };	/* e4m3fn: 1.0, NaN, 2^-9 */
	uint8_t e5[2] = { 0x3c, 0x7c };		/* e5m2: 1.0, Inf */
	double d[4];

	ckpt_convert_to_double(CKPT_F16, h, d, 4);
	CHECK(d[0] == 1.0 && isinf(d[1]) && d[2] == ldexp(1, -24) &&
	      d[3] == -2.0);
	ckpt_convert_to_double(CKPT_F8E4M3, e4, d, 3);
	CHECK(d[0] == 1.0 && isnan(d[1]) && d[2] == ldexp(1, -9));
	ckpt_convert_to_double(CKPT_F8E5M2, e5, d, 2);
	CHECK(d[0] == 1.0 && isinf(d[1]));
	CHECK(ckpt_convert_view_dtype(CKPT_I64, CKPT_BF16) == CKPT_I64);
	CHECK(ckpt_convert_view_dtype(CKPT_F16, CKPT_F32) == CKPT_F32);
	CHECK(ckpt_convert_view_dtype(CKPT_F16, CKPT_DTYPE_COUNT) == CKPT_F16);
}

int main(void)
{
	TEST(test_bf16_rounding);
	TEST(test_f64_once);
	TEST(test_decode);
	return TEST_REPORT();
}
