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

// Softmax and fused softmax-cross-entropy over the last axis of contiguous (M, K) rows, for
// large K (vocabularies): one block of NL_SOFTMAX_THREADS threads per row, grid-stride over
// rows.  Pass 1 keeps an online (max, sum of exp(x - max)) per thread and merges them in a
// fixed tree, so lse = max + log(sum) is computed in float32 and never overflows whatever the
// storage (float16 logits included); pass 2 writes probs = exp(x - lse) and, when targets are
// given (one-hot or soft), grad = scale * (probs - targets) (scale: 1 for a summed loss,
// 1 / rows for a mean) and row_loss[row] = -sum_j targets * (x - lse) (float32; a target of
// 0 contributes nothing even where x is -inf).  grad may alias logits; probs may be 0 (not
// written).  nl_softmax_xent_index takes class indices instead: index (M,) int32, the one-hot
// row of index[row] as the targets; an index outside [0, K) makes that row's loss NaN (the
// host then names it) and its targets zero.
__device__ void nl_lse_merge(float& m, float& s, float m2, float s2) {
    if (m2 == -INFINITY) return;
    if (m == -INFINITY) { m = m2; s = s2; return; }
    if (m2 > m) { s = s * expf(m - m2) + s2; m = m2; }
    else s += s2 * expf(m2 - m);
}

template <int KIND>
__device__ void nl_softmax_xent_impl(const typename nl_elem<KIND>::T* logits,
                                     const typename nl_elem<KIND>::T* targets,
                                     typename nl_elem<KIND>::T* probs,
                                     typename nl_elem<KIND>::T* grad, float* row_loss,
                                     int M, int K, float scale, const int* index = 0) {
    typedef nl_elem<KIND> E;
    __shared__ float ms[NL_SOFTMAX_THREADS], ss[NL_SOFTMAX_THREADS];
    for (int row = blockIdx.x; row < M; row += gridDim.x) {
        const long long base = (long long)row * K;
        float m = -INFINITY, s = 0.0f;
        for (int j = threadIdx.x; j < K; j += NL_SOFTMAX_THREADS)
            nl_lse_merge(m, s, E::load(logits, base + j), 1.0f);
        ms[threadIdx.x] = m;
        ss[threadIdx.x] = s;
        __syncthreads();
        for (int half = NL_SOFTMAX_THREADS / 2; half > 0; half >>= 1) {
            if (threadIdx.x < half) {
                float a = ms[threadIdx.x], b = ss[threadIdx.x];
                nl_lse_merge(a, b, ms[threadIdx.x + half], ss[threadIdx.x + half]);
                ms[threadIdx.x] = a;
                ss[threadIdx.x] = b;
            }
            __syncthreads();
        }
        const float lse = ms[0] + logf(ss[0]);
        __syncthreads();
        float loss = 0.0f;
        const int cls = index ? index[row] : -1;
        const bool bad = index && (cls < 0 || cls >= K);
        for (int j = threadIdx.x; j < K; j += NL_SOFTMAX_THREADS) {
            const float x = E::load(logits, base + j);
            const float p = expf(x - lse);
            if (probs) E::store(probs, base + j, p);
            if (targets || index) {
                const float t = index ? (j == cls ? 1.0f : 0.0f) : E::load(targets, base + j);
                if (t != 0.0f) loss += t * (x - lse);
                E::store(grad, base + j, scale * (p - t));
            }
        }
        if (targets || index) {
            loss = nl_block_reduce(loss, ms, false);
            if (threadIdx.x == 0) row_loss[row] = bad ? NAN : -loss;
        }
    }
}

#define SOFTMAX_XENT_PARAMS(T) const T* logits, const T* targets, T* probs, T* grad, \
    float* row_loss, int M, int K, float scale
NL_THREE_TYPES(nl_softmax_xent, SOFTMAX_XENT_PARAMS, (logits, targets, probs, grad, row_loss, M,
                                                     K, scale))

template <int KIND>
__device__ void nl_softmax_xent_index_impl(const typename nl_elem<KIND>::T* logits,
                                           const int* index, typename nl_elem<KIND>::T* probs,
                                           typename nl_elem<KIND>::T* grad, float* row_loss,
                                           int M, int K, float scale) {
    nl_softmax_xent_impl<KIND>(logits, 0, probs, grad, row_loss, M, K, scale, index);
}
#define SOFTMAX_XENT_INDEX_PARAMS(T) const T* logits, const int* index, T* probs, T* grad, \
    float* row_loss, int M, int K, float scale
NL_THREE_TYPES(nl_softmax_xent_index, SOFTMAX_XENT_INDEX_PARAMS, (logits, index, probs, grad,
                                                                 row_loss, M, K, scale))
