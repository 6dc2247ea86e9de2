/* Stochastic rounding of float32 to bfloat16 bit patterns, deterministic: the random bits of
 * element `index` of parameter `ordinal` at optimizer step `step` are a counter-based hash of
 * (seed, step, ordinal, index) (SplitMix64's finalizer), so a run gives the same bits on any
 * thread count and a resumed run goes on exactly.  The numpy reference is
 * backends/shared/bf16_rounding.py, which computes the same hash.
 *
 * Rounding: the float32 bits u plus 16 random bits r, truncated to the upper half.  The value
 * rounds away from zero (to the next bf16 magnitude) with probability (u mod 2^16) / 2^16, so
 * the result is unbiased in expectation; a float32 that is exactly a bf16 number (low half
 * zero) stays exact, +/-inf stays inf, a NaN becomes the quiet NaN 0x7FC0. */
#ifndef NEONLITE_BF16_STOCHASTIC_H
#define NEONLITE_BF16_STOCHASTIC_H

#include <stdint.h>

static inline uint64_t nl_mix64(uint64_t z)
{
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* The key of one parameter's elements at one step. */
static inline uint64_t nl_round_key(uint64_t seed, uint64_t step, uint64_t ordinal)
{
    return nl_mix64(nl_mix64(nl_mix64(seed) ^ step) ^ ordinal);
}

/* float32 `f` rounded stochastically with the random bits of element `index` under `key`. */
static inline uint16_t f32_to_bf16_stochastic(float f, uint64_t key, uint64_t index)
{
    union { float f; uint32_t u; } v = {.f = f};
    if (f != f)
        return 0x7FC0;
    const uint32_t r = (uint32_t)(nl_mix64(key ^ index) >> 48);
    return (uint16_t)((v.u + r) >> 16);
}

#endif
