/* Runs of a convolution's operands between bfloat16 bits and `real` staging, for the bf16
 * passes of conv.c and conv_direct.c: widened as they are gathered (exact), rounded to nearest
 * even once on the way out.  Included by those sources; not a cffi header. */
#ifndef NEONLITE_CONV_BF16_ROWS_H
#define NEONLITE_CONV_BF16_ROWS_H

#include "bf16_bits.h"
#include "conv_geom.h"

/* n reals rounded up to whole 64-byte lines: the parts of a bf16 pass's work (the widened
 * filter, each thread's slice and its staging) start on cache lines where the work does, so
 * the kernels' vector loads and stores of them do not straddle two. */
static inline int64_t conv_lines(int64_t n)
{
    const int64_t per = 64 / (int64_t)sizeof(real);
    return (n + per - 1) / per * per;
}

/* The widened filter (R*S*C*K) and bias (K) at the head of a bf16 pass's work, in whole
 * lines. */
static inline int64_t conv_filter_head(const conv_geom *g)
{
    return conv_lines(g->R * g->S * g->C * g->K) + conv_lines(g->K);
}

/* dst[0, n) = x[at, at + n) (real), or, where x is NULL, the bits xb[at, at + n) widened. */
static inline void conv_widen(const real *x, const uint16_t *xb, int64_t at, real *dst,
                              int64_t n)
{
    if (x) {
        memcpy(dst, x + at, (size_t)n * sizeof(real));
        return;
    }
#pragma omp simd
    for (int64_t i = 0; i < n; i++)
        dst[i] = (real)bf16_to_f32(xb[at + i]);
}

/* bits ob[i] = round(beta * ob[i] + v[i]) (beta == 0: round(v[i])) for n values. */
static inline void conv_narrow(const real *v, uint16_t *ob, int64_t n, real beta)
{
    if (beta == 0) {
#pragma omp simd
        for (int64_t i = 0; i < n; i++)
            ob[i] = f32_to_bf16((float)v[i]);
        return;
    }
#pragma omp simd
    for (int64_t i = 0; i < n; i++)
        ob[i] = f32_to_bf16((float)(beta * (real)bf16_to_f32(ob[i]) + v[i]));
}

#endif
