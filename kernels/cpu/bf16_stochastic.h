/* Stochastic rounding of float32 to bfloat16 bit patterns, deterministic: the random bits of
 * element `index` of parameter `ordinal` at optimizer step `step` are a counter-based hash of
 * (seed, step, ordinal, index), so a run gives the same bits on any thread count and a resumed
 * run goes on exactly: SplitMix64's finalizer of (key ^ index / 4), whose 64 bits give four
 * elements their 16 bits each (element index takes bits 16 * (index mod 4) and up).  The numpy reference is
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

/* The 16 random bits of element `index` from its word, nl_mix64(key ^ (index >> 2)). */
static inline uint32_t nl_round_bits(uint64_t word, uint64_t index)
{
    return (uint32_t)(word >> ((index & 3) * 16)) & 0xFFFFu;
}

/* float32 `f` rounded with 16 random bits `r`: (bits + r) >> 16. */
static inline uint16_t f32_to_bf16_with_bits(float f, uint32_t r)
{
    union { float f; uint32_t u; } v = {.f = f};
    if (f != f)
        return 0x7FC0;
    return (uint16_t)((v.u + r) >> 16);
}

/* float32 `f` rounded stochastically with the random bits of element `index` under `key`. */
static inline uint16_t f32_to_bf16_stochastic(float f, uint64_t key, uint64_t index)
{
    return f32_to_bf16_with_bits(f, nl_round_bits(nl_mix64(key ^ (index >> 2)), index));
}

#endif
