/* Chunks of bfloat16 rows staged in `real` (stack buffers of BF16_ROW_CHUNK elements, in L1)
 * for the row kernels that take bf16 operands directly (norm.c, rmsnorm.c): widened exactly,
 * narrowed by f32_to_bf16's rounding (to nearest, ties to even).  Not a cffi header. */
#ifndef NEONLITE_BF16_ROWS_H
#define NEONLITE_BF16_ROWS_H

#include "bf16_bits.h"

/* Columns of a bf16 row staged at a time. */
#define BF16_ROW_CHUNK 256

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

/* bits[k] = in[k] rounded to bf16, k < n. */
static inline void bf16_narrow(const real *in, uint16_t *bits, int64_t n)
{
#pragma omp simd
    for (int64_t k = 0; k < n; k++)
        bits[k] = f32_to_bf16((float)in[k]);
}

#endif
