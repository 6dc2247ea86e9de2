/* How a convolution's weight gradient (conv_direct_update, conv_update_tiled) is split: its
 * N*P output rows are cut into conv_update_block_count(g) fixed blocks, block b summed into
 * its own partial (R*S*C, K) and the partials then added in block order, in double.  The count
 * comes from the shape alone (about CONV_UPDATE_PIXELS output pixels a block, at most
 * CONV_UPDATE_BLOCKS blocks, at most CONV_UPDATE_PARTIAL_BYTES of partials, at most one block
 * per output row), so the result does not depend on the thread count, and each block's float
 * sums stay short.  Included by conv.c and conv_direct.c; not a cffi header. */
#ifndef NEONLITE_CONV_UPDATE_BLOCKS_H
#define NEONLITE_CONV_UPDATE_BLOCKS_H

#include "bf16_bits.h"

#define CONV_UPDATE_PIXELS 512
#define CONV_UPDATE_BLOCKS 32
#define CONV_UPDATE_PARTIAL_BYTES ((int64_t)32 << 20)

static inline int64_t conv_update_block_count(const conv_geom *g)
{
    const int64_t rows = g->N * g->P, pixels = rows * g->Q;
    const int64_t size = g->R * g->S * g->C * g->K;
    const int64_t cap = CONV_UPDATE_PARTIAL_BYTES / (size * (int64_t)sizeof(real));
    int64_t n = (pixels + CONV_UPDATE_PIXELS - 1) / CONV_UPDATE_PIXELS;
    n = n > CONV_UPDATE_BLOCKS ? CONV_UPDATE_BLOCKS : n;
    n = n > cap ? cap : n;
    n = n > rows ? rows : n;
    return n < 1 ? 1 : n;
}

/* df[i0, i1) = beta * df + the sum of the nblk partials (size each) in block order, in
 * double; CONV_SUM_WIDTH elements at a time, so their sums are independent chains. */
#define CONV_SUM_WIDTH 16
static inline void conv_update_sum(real *df, const real *partials, int64_t nblk, int64_t size,
                                   int64_t i0, int64_t i1, real beta)
{
    for (int64_t i = i0; i < i1; i += CONV_SUM_WIDTH) {
        const int64_t w = i1 - i < CONV_SUM_WIDTH ? i1 - i : CONV_SUM_WIDTH;
        double sum[CONV_SUM_WIDTH] = {0};
        for (int64_t b = 0; b < nblk; b++)
#pragma omp simd
            for (int64_t j = 0; j < w; j++)
                sum[j] += partials[b * size + i + j];
        for (int64_t j = 0; j < w; j++)
            df[i + j] = (real)(beta == 0 ? sum[j] : (double)beta * df[i + j] + sum[j]);
    }
}

/* conv_update_sum into bf16 bits: dfb[i0, i1) = round(beta * dfb + the sum), the sum and the
 * scaling in double as conv_update_sum's, rounded to nearest even once. */
static inline void conv_update_sum_bf16(uint16_t *dfb, const real *partials, int64_t nblk,
                                        int64_t size, int64_t i0, int64_t i1, real beta)
{
    for (int64_t i = i0; i < i1; i += CONV_SUM_WIDTH) {
        const int64_t w = i1 - i < CONV_SUM_WIDTH ? i1 - i : CONV_SUM_WIDTH;
        double sum[CONV_SUM_WIDTH] = {0};
        for (int64_t b = 0; b < nblk; b++)
#pragma omp simd
            for (int64_t j = 0; j < w; j++)
                sum[j] += partials[b * size + i + j];
        for (int64_t j = 0; j < w; j++)
            dfb[i + j] = f32_to_bf16((float)(beta == 0 ? sum[j]
                                             : (double)beta * bf16_to_f32(dfb[i + j]) + sum[j]));
    }
}

#endif
