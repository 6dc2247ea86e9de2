/* bfloat16 bit patterns (uint16: the upper half of a float32) and the one rounding rule every
 * C kernel uses to make them: float32 -> bfloat16 rounds to nearest, ties to even; a NaN
 * becomes the quiet NaN 0x7FC0 (the numpy reference, backends/reference/optree.py's
 * f32_to_bf16, rounds the same way). */
#ifndef NEONLITE_BF16_BITS_H
#define NEONLITE_BF16_BITS_H

#include <stdint.h>

static inline float bf16_to_f32(uint16_t bits)
{
    union { uint32_t u; float f; } v = {.u = (uint32_t)bits << 16};
    return v.f;
}

static inline uint16_t f32_to_bf16(float f)
{
    union { float f; uint32_t u; } v = {.f = f};
    if (f != f)
        return 0x7FC0;
    return (uint16_t)((v.u + 0x7FFFu + ((v.u >> 16) & 1u)) >> 16);
}

#endif
