/* The bfloat16 staging of the fused attention kernels (flash_attention.c includes this file
 * after flash_attention_tiles.h; it is not a cffi header).  fa_fprop_bf16 and fa_bprop_bf16
 * take q, k, v, out (dout, dq, dk, dv) as bf16 bit patterns and compute in `real`: each block
 * of rows is widened (exactly) into a thread's staging the first time a tile reads it, the
 * tiles run on the staging as the float kernels run on their operands, and each written
 * block is rounded to nearest even (bf16_bits.h) once its sums are complete.  No widened or
 * float copy of a whole tensor is made.  Needs common.h and flash_attention_tiles.h first. */
#ifndef NEONLITE_FLASH_ATTENTION_BF16_H
#define NEONLITE_FLASH_ATTENTION_BF16_H

#include "bf16_bits.h"

/* dst (n x w, ld ldd) = bf16 rows src (n x w, ld lds), exactly. */
static void fa_widen_rows(const uint16_t *restrict src, int64_t lds, int64_t n, int64_t w,
                          real *restrict dst, int64_t ldd)
{
    for (int64_t r = 0; r < n; r++) {
        const uint16_t *from = src + r * lds;
        real *to = dst + r * ldd;
#pragma omp simd
        for (int64_t d = 0; d < w; d++)
            to[d] = (real)bf16_to_f32(from[d]);
    }
}

/* bf16 rows dst (n x w, ld ldd) = src (n x w, ld lds) rounded to nearest even. */
static void fa_narrow_rows(const real *restrict src, int64_t lds, int64_t n, int64_t w,
                           uint16_t *restrict dst, int64_t ldd)
{
    for (int64_t r = 0; r < n; r++) {
        const real *from = src + r * lds;
        uint16_t *to = dst + r * ldd;
#pragma omp simd
        for (int64_t d = 0; d < w; d++)
            to[d] = f32_to_bf16((float)from[d]);
    }
}

/* Rows [0, n) of bf16 src (ld lds, width w) asked for from memory (a cache line at a time),
 * so they arrive while other rows are widened. */
static void fa_prefetch_rows(const uint16_t *src, int64_t lds, int64_t n, int64_t w)
{
    for (int64_t r = 0; r < n; r++)
        for (int64_t d = 0; d < w; d += 32)
            __builtin_prefetch(src + r * lds + d);
}

/* A bit per block of a slice: which blocks a thread has widened into its staging. */
static inline int fa_bit(const uint64_t *bits, int64_t i)
{
    return (int)(bits[i / 64] >> (i % 64) & 1);
}

static inline void fa_set_bit(uint64_t *bits, int64_t i)
{
    bits[i / 64] |= (uint64_t)1 << (i % 64);
}

/* fa_rowsums of bf16 o and dout rows (dout at row stride ldo; or, when `wide` is not NULL,
 * already widened there, contiguous): FA_ROWSUMS_CHUNK rows at a time widened into stack
 * buffers (each row's sum is fa_dot's, whichever rows it is computed with, so the results
 * are fa_rowsums' on the widened rows). */
#define FA_ROWSUMS_CHUNK 8
static void fa_rowsums_bf16_from(const uint16_t *o, int64_t lo, const uint16_t *dout,
                                 int64_t ldo, const real *wide, int64_t Tq, int64_t dv,
                                 real *D)
{
    real os[FA_ROWSUMS_CHUNK * FA_MAX_WIDTH], ds[FA_ROWSUMS_CHUNK * FA_MAX_WIDTH];
    for (int64_t i = 0; i < Tq; i += FA_ROWSUMS_CHUNK) {
        const int64_t n = Tq - i < FA_ROWSUMS_CHUNK ? Tq - i : FA_ROWSUMS_CHUNK;
        fa_widen_rows(o + i * lo, lo, n, dv, os, dv);
        if (!wide)
            fa_widen_rows(dout + i * ldo, ldo, n, dv, ds, dv);
        fa_rowsums(os, dv, wide ? wide + i * dv : ds, dv, n, dv, D + i);
    }
}

static void fa_rowsums_bf16(const uint16_t *o, int64_t lo, const uint16_t *dout, int64_t ldo,
                            int64_t Tq, int64_t dv, real *D)
{
    fa_rowsums_bf16_from(o, lo, dout, ldo, NULL, Tq, dv, D);
}

#endif
