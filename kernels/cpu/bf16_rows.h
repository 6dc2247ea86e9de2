/* Chunks of bfloat16 rows staged in `real` (stack buffers of BF16_ROW_CHUNK elements, in L1)
 * for the row kernels that take bf16 operands directly (norm.c, rmsnorm.c): widened exactly,
 * narrowed by f32_to_bf16's rounding (to nearest, ties to even).  Not a cffi header. */
#ifndef NEONLITE_BF16_ROWS_H
#define NEONLITE_BF16_ROWS_H

#include "bf16_bits.h"

/* Columns of a bf16 row staged at a time. */
#define BF16_ROW_CHUNK 256
/* Rows of at most this many columns are widened once, whole, into a stack buffer of the
 * kernel's (bf16_stage); longer ones a chunk at a time, again for each pass over the row. */
#define BF16_ROW_STAGED 2048

/* Stack buffers of staged rows start on a cache line: whole-vector loads and stores then do
 * not straddle two lines (as they would 4 bytes off, say, after a scalar field). */
#define BF16_ALIGNED __attribute__((aligned(64)))

/* The length of the chunk of a D-column row starting at column d0. */
static inline int64_t bf16_chunk(int64_t D, int64_t d0)
{
    return D - d0 < BF16_ROW_CHUNK ? D - d0 : BF16_ROW_CHUNK;
}

/* out[k] = bits[k] widened, k < n. */
static inline void bf16_widen(const uint16_t *bits, real *out, int64_t n)
{
#pragma omp simd
    for (int64_t k = 0; k < n; k++)
        out[k] = (real)bf16_to_f32(bits[k]);
}

/* out[k] = bits[k] + more[k], both widened, the sum in `real` (k < n). */
static inline void bf16_widen_sum(const uint16_t *bits, const uint16_t *more, real *out,
                                  int64_t n)
{
#pragma omp simd
    for (int64_t k = 0; k < n; k++)
        out[k] = (real)bf16_to_f32(bits[k]) + (real)bf16_to_f32(more[k]);
}

/* acc[k] += bits[k] widened, k < n. */
static inline void bf16_accumulate(real *restrict acc, const uint16_t *restrict bits, int64_t n)
{
#pragma omp simd
    for (int64_t k = 0; k < n; k++)
        acc[k] += (real)bf16_to_f32(bits[k]);
}

/* bits[k] = in[k] rounded to bf16, k < n. */
static inline void bf16_narrow(const real *in, uint16_t *bits, int64_t n)
{
#pragma omp simd
    for (int64_t k = 0; k < n; k++)
        bits[k] = f32_to_bf16((float)in[k]);
}

/* The widened chunk [d0, d0 + n) of bf16 row x (plus row `more` where not NULL, the sum in
 * `real`).  `row` (NULL, or BF16_ROW_STAGED reals for a row that fits): the whole row, widened
 * into it by the first pass (`first`) and read from it by the later ones; without it the
 * chunk is widened into `buf` (BF16_ROW_CHUNK reals) at every pass. */
static inline const real *bf16_stage(const uint16_t *x, const uint16_t *more, real *row,
                                     real *buf, int64_t d0, int64_t n, int first)
{
    if (row && !first)
        return row + d0;
    real *out = row ? row + d0 : buf;
    if (more)
        bf16_widen_sum(x + d0, more + d0, out, n);
    else
        bf16_widen(x + d0, out, n);
    return out;
}

#endif
