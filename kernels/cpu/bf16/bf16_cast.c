/* float32 <-> bfloat16 casts (see bf16_cast.h): integer arithmetic only, the rounding rule of
 * bf16_bits.h, each element independent (so any thread count gives the same bits). */
#include <omp.h>

#include "../bf16_bits.h"
#include "../common.h"
#include "bf16_cast.h"

/* A cast moves 6 bytes per element and computes next to nothing: threads pay for their start
 * and their wait only on arrays much larger than the elementwise kernels' NL_PARALLEL_MIN. */
#define NL_CAST_PARALLEL_MIN (1 << 20)

void nl_f32_to_bf16(const float *src, uint16_t *dst, int64_t n)
{
    #pragma omp parallel for schedule(static) if (n >= NL_CAST_PARALLEL_MIN)
    for (int64_t i = 0; i < n; i++)
        dst[i] = f32_to_bf16(src[i]);
}

void nl_bf16_to_f32(const uint16_t *src, float *dst, int64_t n)
{
    #pragma omp parallel for schedule(static) if (n >= NL_CAST_PARALLEL_MIN)
    for (int64_t i = 0; i < n; i++)
        dst[i] = bf16_to_f32(src[i]);
}
