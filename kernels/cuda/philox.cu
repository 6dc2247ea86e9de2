// Counter-based uniform random numbers: Philox4x32-10 (Salmon et al., "Parallel random numbers:
// as easy as 1, 2, 3", SC'11), the generator of cuRAND's and PyTorch's dropout.
//
// Element e of a draw gets word (e % 4) of philox(counter = base + e / 4, key = seed), so a
// draw is a pure function of (seed, base): the same seed gives the same dropout masks, on
// any launch shape.  base advances by ceil(n / 4) per draw (the backend keeps it).
// Output: contiguous n elements, u = (word >> 8) * 2^-24 in [0, 1), scaled to [low, high).
#include "neonlite_common.cuh"
#include "philox.cuh"

template <int KIND>
__device__ __forceinline__ void nl_store_uniform(void* out, long long i, float v) {
    if (KIND == 0) ((float*)out)[i] = v;
    else if (KIND == 1) ((nl_u16*)out)[i] = nl_f32_to_f16(v);
    else ((nl_u16*)out)[i] = (nl_u16)nl_f32_to_bf16(v);
}

template <int KIND>
__device__ void nl_uniform_impl(void* out, long long n, unsigned int seed_lo,
                                unsigned int seed_hi, unsigned int base_lo, unsigned int base_hi,
                                float low, float high) {
    const unsigned int key[2] = {seed_lo, seed_hi};
    const unsigned long long base = ((unsigned long long)base_hi << 32) | base_lo;
    const long long groups = (n + 3) / 4;
    for (long long g = (long long)blockIdx.x * blockDim.x + threadIdx.x; g < groups;
         g += (long long)blockDim.x * gridDim.x) {
        unsigned long long ctr = base + (unsigned long long)g;
        unsigned int c[4] = {(unsigned int)ctr, (unsigned int)(ctr >> 32), 0u, 0u};
        nl_philox4x32_10(c, key);
        for (int w = 0; w < 4; ++w) {
            long long i = 4 * g + w;
            if (i >= n) break;
            float u = (float)(c[w] >> 8) * 5.9604644775390625e-08f;
            float v = low + u * (high - low);
            if (v >= high) v = nextafterf(high, low);
            nl_store_uniform<KIND>(out, i, v);
        }
    }
}

#define NL_UNIFORM_PARAMS(T) T* out, long long n, unsigned int seed_lo, unsigned int seed_hi, \
    unsigned int base_lo, unsigned int base_hi, float low, float high
NL_THREE_TYPES(nl_uniform, NL_UNIFORM_PARAMS, (out, n, seed_lo, seed_hi, base_lo, base_hi, low, high))

// Inverted-dropout masks of whole examples (neonlite.backends.philox.example_masks, bit for
// bit): out is (rows, per) contiguous, row n the mask of global example first + n; element j
// of row n keeps (value scale = float32(1 / keep), else 0) when the uniform from word j % 4 of
// philox(counter = (g lo, g hi, step, stream), key = seed), g = (first + n) * ceil(per / 4)
// + j / 4, is below keep.  One thread per group of four elements.
template <int KIND>
__device__ void nl_example_mask_impl(void* out, long long rows, long long per,
                                     unsigned int first_lo, unsigned int first_hi,
                                     unsigned int step, unsigned int stream, unsigned int seed_lo,
                                     unsigned int seed_hi, float keep, float scale) {
    const unsigned int key[2] = {seed_lo, seed_hi};
    const unsigned long long first = ((unsigned long long)first_hi << 32) | first_lo;
    const long long groups = (per + 3) / 4, total = rows * groups;
    for (long long g = (long long)blockIdx.x * blockDim.x + threadIdx.x; g < total;
         g += (long long)blockDim.x * gridDim.x) {
        const long long row = g / groups, part = g - row * groups;
        const unsigned long long ctr = first * (unsigned long long)groups + (unsigned long long)g;
        unsigned int c[4] = {(unsigned int)ctr, (unsigned int)(ctr >> 32), step, stream};
        nl_philox4x32_10(c, key);
        for (int w = 0; w < 4; ++w) {
            const long long j = 4 * part + w;
            if (j >= per) break;
            const float u = (float)(c[w] >> 8) * 5.9604644775390625e-08f;
            nl_store_uniform<KIND>(out, row * per + j, u < keep ? scale : 0.0f);
        }
    }
}

#define NL_EXAMPLE_MASK_PARAMS(T) T* out, long long rows, long long per, unsigned int first_lo, \
    unsigned int first_hi, unsigned int step, unsigned int stream, unsigned int seed_lo, \
    unsigned int seed_hi, float keep, float scale
NL_THREE_TYPES(nl_example_mask, NL_EXAMPLE_MASK_PARAMS,
               (out, rows, per, first_lo, first_hi, step, stream, seed_lo, seed_hi, keep, scale))

// The raw 32-bit words, for testing the generator against its known-answer vectors: one
// thread per counter i writes philox(ctr[4*i .. 4*i+3], key[2*i .. 2*i+1]) to out[4*i ..].
extern "C" __global__ void nl_philox_words(unsigned int* out, const unsigned int* ctr,
                                           const unsigned int* key, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    unsigned int c[4] = {ctr[4 * i], ctr[4 * i + 1], ctr[4 * i + 2], ctr[4 * i + 3]};
    const unsigned int k[2] = {key[2 * i], key[2 * i + 1]};
    nl_philox4x32_10(c, k);
    for (int w = 0; w < 4; ++w) out[4 * i + w] = c[w];
}
