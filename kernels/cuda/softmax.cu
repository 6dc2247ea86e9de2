// Masked softmax over the last axis of x (B, Tq, Tk) (attention scores): one block of
// NL_SOFTMAX_THREADS threads per row (b, i).  Key j is hidden when causal and j > i + Tk - Tq,
// or when key_mask (N, Tk), B a multiple of N, is 0 at (b / (B / N), j).  out = softmax of
// scale * x over the visible keys, 0 at hidden ones; a row with every key hidden is all zeros.
// out may be x.
#include "neonlite_common.cuh"

#define NL_SOFTMAX_THREADS 256

__device__ float nl_block_reduce(float v, float* shared, bool is_max) {
    shared[threadIdx.x] = v;
    __syncthreads();
    for (int s = NL_SOFTMAX_THREADS / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) {
            float a = shared[threadIdx.x], b = shared[threadIdx.x + s];
            shared[threadIdx.x] = is_max ? nl_max(a, b) : a + b;
        }
        __syncthreads();
    }
    float result = shared[0];
    __syncthreads();
    return result;
}

template <int KIND>
__device__ void nl_masked_softmax_impl(typename nl_elem<KIND>::T* out,
                                       const typename nl_elem<KIND>::T* x,
                                       const typename nl_elem<KIND>::T* key_mask,
                                       int B, int Tq, int Tk, int N, float scale, int causal) {
    typedef nl_elem<KIND> E;
    __shared__ float shared[NL_SOFTMAX_THREADS];
    for (long long row = blockIdx.x; row < (long long)B * Tq; row += gridDim.x) {
        const int b = (int)(row / Tq), i = (int)(row % Tq);
        const long long base = row * Tk;
        const long long mask_base = key_mask ? (long long)(b / (B / N)) * Tk : 0;
        const int last_visible = causal ? i + Tk - Tq : Tk - 1;
        float peak = -INFINITY;
        for (int j = threadIdx.x; j < Tk; j += NL_SOFTMAX_THREADS) {
            bool visible = j <= last_visible && (!key_mask || E::load(key_mask, mask_base + j) != 0.0f);
            if (visible) peak = nl_max(peak, scale * E::load(x, base + j));
        }
        peak = nl_block_reduce(peak, shared, true);
        if (peak == -INFINITY) peak = 0.0f;
        float total = 0.0f;
        for (int j = threadIdx.x; j < Tk; j += NL_SOFTMAX_THREADS) {
            bool visible = j <= last_visible && (!key_mask || E::load(key_mask, mask_base + j) != 0.0f);
            if (visible) total += expf(scale * E::load(x, base + j) - peak);
        }
        total = nl_block_reduce(total, shared, false);
        const float inv = 1.0f / (total == 0.0f ? 1.0f : total);
        for (int j = threadIdx.x; j < Tk; j += NL_SOFTMAX_THREADS) {
            bool visible = j <= last_visible && (!key_mask || E::load(key_mask, mask_base + j) != 0.0f);
            float v = visible ? expf(scale * E::load(x, base + j) - peak) * inv : 0.0f;
            E::store(out, base + j, v);
        }
    }
}

#define MASKED_SOFTMAX_PARAMS(T) T* out, const T* x, const T* key_mask, int B, int Tq, int Tk, \
    int N, float scale, int causal
NL_THREE_TYPES(nl_masked_softmax, MASKED_SOFTMAX_PARAMS, (out, x, key_mask, B, Tq, Tk, N, scale,
                                                         causal))
