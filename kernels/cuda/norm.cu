// Batch norm, layer norm and RMSNorm on row-major (M, C) / (M, D) tensors (NHWC images are
// (N*H*W, C)).
// Arithmetic in float32 whatever the storage; every reduction runs in a fixed order (tree in
// shared memory, then partials summed in split order), so results are deterministic.  RMSNorm
// (at the end) has kernels of its own.
//
// Column sums (batch norm statistics and both norms' parameter gradients): nl_colsum2 gives
// each block 32 columns and one slice of rows (grid (ceil(C / 32), splits), block (32, 8)) and
// writes partial[split][c] = (s1, s2):
//   mode 0: s1 = sum (u - u[0, c]), s2 = sum (u - u[0, c])^2   (shifted, against cancellation)
//   mode 1: s1 = sum g, s2 = sum g * v, g = u masked by w > 0 when w is given (a fused ReLU)
// The finalize kernels sum the partials in split order.
#include "neonlite_common.cuh"

#define NL_NORM_THREADS 256

// Sum of v over the block (blockDim.x * blockDim.y == NL_NORM_THREADS threads).
__device__ float nl_norm_block_sum(float v, float* shared) {
    const int tid = threadIdx.x + threadIdx.y * blockDim.x;
    shared[tid] = v;
    __syncthreads();
    for (int s = NL_NORM_THREADS / 2; s > 0; s >>= 1) {
        if (tid < s) shared[tid] += shared[tid + s];
        __syncthreads();
    }
    float total = shared[0];
    __syncthreads();
    return total;
}

template <int KIND>
__device__ void nl_colsum2_impl(const typename nl_elem<KIND>::T* u,
                                const typename nl_elem<KIND>::T* v,
                                const typename nl_elem<KIND>::T* w, float* partial, int mode,
                                int M, int C, int rows_per_split) {
    typedef nl_elem<KIND> E;
    __shared__ float s1s[8][33], s2s[8][33];
    const int c = blockIdx.x * 32 + threadIdx.x, split = blockIdx.y;
    const int r0 = split * rows_per_split, r1 = min(M, r0 + rows_per_split);
    float s1 = 0.0f, s2 = 0.0f;
    if (c < C) {
        const float shift = mode == 0 ? E::load(u, c) : 0.0f;
        for (int r = r0 + threadIdx.y; r < r1; r += 8) {
            long long at = (long long)r * C + c;
            float a = E::load(u, at);
            if (mode == 0) {
                a -= shift;
                s1 += a;
                s2 += a * a;
            } else {
                if (w && !(E::load(w, at) > 0.0f)) a = 0.0f;
                s1 += a;
                s2 += a * E::load(v, at);
            }
        }
    }
    s1s[threadIdx.y][threadIdx.x] = s1;
    s2s[threadIdx.y][threadIdx.x] = s2;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        for (int k = 1; k < 8; ++k) { s1 += s1s[k][threadIdx.x]; s2 += s2s[k][threadIdx.x]; }
        partial[((long long)split * C + c) * 2] = s1;
        partial[((long long)split * C + c) * 2 + 1] = s2;
    }
}

// Column c's (s1, s2) from nl_colsum2's partials, added in split order.
__device__ __forceinline__ void nl_partial_sums(const float* partial, int c, int C, int splits,
                                                float* s1, float* s2) {
    float a = 0.0f, b = 0.0f;
    for (int s = 0; s < splits; ++s) {
        a += partial[((long long)s * C + c) * 2];
        b += partial[((long long)s * C + c) * 2 + 1];
    }
    *s1 = a;
    *s2 = b;
}

// Batch norm statistics from mode-0 partials: mean, invstd = 1 / sqrt(var + eps) (biased var),
// running_mean / running_var (unbiased var) updated as r = momentum * r + (1 - momentum) * stat.
template <int KIND>
__device__ void nl_bn_stats_impl(const float* partial, const typename nl_elem<KIND>::T* x,
                                 typename nl_elem<KIND>::T* mean,
                                 typename nl_elem<KIND>::T* invstd,
                                 typename nl_elem<KIND>::T* running_mean,
                                 typename nl_elem<KIND>::T* running_var, int M, int C,
                                 int splits, float eps, float momentum) {
    typedef nl_elem<KIND> E;
    NL_FOR(c, C) {
        float s1, s2;
        nl_partial_sums(partial, c, C, splits, &s1, &s2);
        const float m = (float)M, d = s1 / m;
        float var = (s2 - s1 * d) / m;
        var = var > 0.0f ? var : 0.0f;
        const float mu = E::load(x, c) + d;
        E::store(mean, c, mu);
        E::store(invstd, c, 1.0f / sqrtf(var + eps));
        const float unbiased = var * m / (M > 1 ? m - 1.0f : 1.0f);
        E::store(running_mean, c, momentum * E::load(running_mean, c) + (1.0f - momentum) * mu);
        E::store(running_var, c, momentum * E::load(running_var, c) +
                                 (1.0f - momentum) * unbiased);
    }
}

// xhat = (x - mean) * invstd; y = gamma * xhat + beta, then ReLU when relu != 0.
template <int KIND>
__device__ void nl_bn_apply_impl(const typename nl_elem<KIND>::T* x,
                                 const typename nl_elem<KIND>::T* mean,
                                 const typename nl_elem<KIND>::T* invstd,
                                 const typename nl_elem<KIND>::T* gamma,
                                 const typename nl_elem<KIND>::T* beta,
                                 typename nl_elem<KIND>::T* xhat, typename nl_elem<KIND>::T* y,
                                 long long M, int C, int relu) {
    typedef nl_elem<KIND> E;
    NL_FOR(i, M * C) {
        const int c = (int)(i % C);
        float h = (E::load(x, i) - E::load(mean, c)) * E::load(invstd, c);
        float out = E::load(gamma, c) * h + E::load(beta, c);
        if (relu && out < 0.0f) out = 0.0f;  // a NaN stays NaN, as on the CPU
        E::store(xhat, i, h);
        E::store(y, i, out);
    }
}

// Mode-1 partials -> sums[0][c] = s1, sums[1][c] = s2 (float32) and, when given,
// acc1[c] += s1, acc2[c] += s2 (dbeta, dgamma, accumulated as the contract says).
template <int KIND>
__device__ void nl_colsum_finish_impl(const float* partial, float* sums,
                                      typename nl_elem<KIND>::T* acc1,
                                      typename nl_elem<KIND>::T* acc2, int C, int splits) {
    typedef nl_elem<KIND> E;
    NL_FOR(c, C) {
        float s1, s2;
        nl_partial_sums(partial, c, C, splits, &s1, &s2);
        sums[c] = s1;
        sums[C + c] = s2;
        if (acc1) E::store(acc1, c, E::load(acc1, c) + s1);
        if (acc2) E::store(acc2, c, E::load(acc2, c) + s2);
    }
}

// Batch norm data gradient: g = dy (masked by y > 0 when y is given: the fused ReLU),
// dx = gamma * invstd / M * (M * g - sum g - xhat * sum(g * xhat)) + beta_acc * dx.
template <int KIND>
__device__ void nl_bn_bprop_impl(const typename nl_elem<KIND>::T* dy,
                                 const typename nl_elem<KIND>::T* y,
                                 const typename nl_elem<KIND>::T* xhat,
                                 const typename nl_elem<KIND>::T* invstd,
                                 const typename nl_elem<KIND>::T* gamma, const float* sums,
                                 typename nl_elem<KIND>::T* dx, long long M, int C,
                                 float beta_acc) {
    typedef nl_elem<KIND> E;
    const float m = (float)M;
    NL_FOR(i, M * C) {
        const int c = (int)(i % C);
        float g = E::load(dy, i);
        if (y && !(E::load(y, i) > 0.0f)) g = 0.0f;
        float v = E::load(gamma, c) * E::load(invstd, c) / m *
                  (m * g - sums[c] - E::load(xhat, i) * sums[C + c]);
        if (beta_acc != 0.0f) v += beta_acc * E::load(dx, i);
        E::store(dx, i, v);
    }
}

// Layer norm over the last axis, one block of NL_NORM_THREADS threads per row (grid-stride over
// rows): mean, biased variance by a second pass over (x - mean)^2, invstd[row] =
// 1 / sqrt(var + eps), xhat = (x - mean) * invstd, y = gamma * xhat + beta.
template <int KIND>
__device__ void nl_ln_fprop_impl(const typename nl_elem<KIND>::T* x,
                                 const typename nl_elem<KIND>::T* gamma,
                                 const typename nl_elem<KIND>::T* beta,
                                 typename nl_elem<KIND>::T* y, typename nl_elem<KIND>::T* xhat,
                                 typename nl_elem<KIND>::T* invstd, int M, int D, float eps) {
    typedef nl_elem<KIND> E;
    __shared__ float shared[NL_NORM_THREADS];
    for (int row = blockIdx.x; row < M; row += gridDim.x) {
        const long long base = (long long)row * D;
        float s = 0.0f;
        for (int j = threadIdx.x; j < D; j += NL_NORM_THREADS) s += E::load(x, base + j);
        const float mean = nl_norm_block_sum(s, shared) / (float)D;
        float q = 0.0f;
        for (int j = threadIdx.x; j < D; j += NL_NORM_THREADS) {
            float d = E::load(x, base + j) - mean;
            q += d * d;
        }
        const float inv = 1.0f / sqrtf(nl_norm_block_sum(q, shared) / (float)D + eps);
        for (int j = threadIdx.x; j < D; j += NL_NORM_THREADS) {
            float h = (E::load(x, base + j) - mean) * inv;
            E::store(xhat, base + j, h);
            E::store(y, base + j, E::load(gamma, j) * h + E::load(beta, j));
        }
        if (threadIdx.x == 0) E::store(invstd, row, inv);
    }
}

// Layer norm data gradient, one block per row: a = mean(dy * gamma), b = mean(dy * gamma * xhat),
// dx = invstd * (dy * gamma - a - xhat * b).
template <int KIND>
__device__ void nl_ln_bprop_impl(const typename nl_elem<KIND>::T* dy,
                                 const typename nl_elem<KIND>::T* xhat,
                                 const typename nl_elem<KIND>::T* invstd,
                                 const typename nl_elem<KIND>::T* gamma,
                                 typename nl_elem<KIND>::T* dx, int M, int D) {
    typedef nl_elem<KIND> E;
    __shared__ float shared[NL_NORM_THREADS];
    for (int row = blockIdx.x; row < M; row += gridDim.x) {
        const long long base = (long long)row * D;
        float sa = 0.0f, sb = 0.0f;
        for (int j = threadIdx.x; j < D; j += NL_NORM_THREADS) {
            float g = E::load(dy, base + j) * E::load(gamma, j);
            sa += g;
            sb += g * E::load(xhat, base + j);
        }
        const float a = nl_norm_block_sum(sa, shared) / (float)D;
        const float b = nl_norm_block_sum(sb, shared) / (float)D;
        const float inv = E::load(invstd, row);
        for (int j = threadIdx.x; j < D; j += NL_NORM_THREADS) {
            float g = E::load(dy, base + j) * E::load(gamma, j);
            E::store(dx, base + j, inv * (g - a - E::load(xhat, base + j) * b));
        }
    }
}

#define COLSUM2_PARAMS(T) const T* u, const T* v, const T* w, float* partial, int mode, int M, \
    int C, int rows_per_split
NL_THREE_TYPES(nl_colsum2, COLSUM2_PARAMS, (u, v, w, partial, mode, M, C, rows_per_split))
#define BN_STATS_PARAMS(T) const float* partial, const T* x, T* mean, T* invstd, \
    T* running_mean, T* running_var, int M, int C, int splits, float eps, float momentum
NL_THREE_TYPES(nl_bn_stats, BN_STATS_PARAMS, (partial, x, mean, invstd, running_mean,
                                              running_var, M, C, splits, eps, momentum))
#define BN_APPLY_PARAMS(T) const T* x, const T* mean, const T* invstd, const T* gamma, \
    const T* beta, T* xhat, T* y, long long M, int C, int relu
NL_THREE_TYPES(nl_bn_apply, BN_APPLY_PARAMS, (x, mean, invstd, gamma, beta, xhat, y, M, C, relu))
#define COLSUM_FINISH_PARAMS(T) const float* partial, float* sums, T* acc1, T* acc2, int C, \
    int splits
NL_THREE_TYPES(nl_colsum_finish, COLSUM_FINISH_PARAMS, (partial, sums, acc1, acc2, C, splits))
#define BN_BPROP_PARAMS(T) const T* dy, const T* y, const T* xhat, const T* invstd, \
    const T* gamma, const float* sums, T* dx, long long M, int C, float beta_acc
NL_THREE_TYPES(nl_bn_bprop, BN_BPROP_PARAMS, (dy, y, xhat, invstd, gamma, sums, dx, M, C,
                                              beta_acc))
#define LN_FPROP_PARAMS(T) const T* x, const T* gamma, const T* beta, T* y, T* xhat, T* invstd, \
    int M, int D, float eps
NL_THREE_TYPES(nl_ln_fprop, LN_FPROP_PARAMS, (x, gamma, beta, y, xhat, invstd, M, D, eps))
#define LN_BPROP_PARAMS(T) const T* dy, const T* xhat, const T* invstd, const T* gamma, T* dx, \
    int M, int D
NL_THREE_TYPES(nl_ln_bprop, LN_BPROP_PARAMS, (dy, xhat, invstd, gamma, dx, M, D))

// ---- RMSNorm ----------------------------------------------------------------------------
// RMSNorm over the last axis (no mean subtracted, no shift), one block of NL_NORM_THREADS
// threads per row (grid-stride over rows): with residual (and total) given, total = x +
// residual is written and normalized in x's place; rstd[row] = 1 / sqrt(mean(x^2) + eps),
// xhat = x * rstd (not written when xhat is NULL), y = gamma * xhat.
template <int KIND>
__device__ void nl_rms_fprop_impl(const typename nl_elem<KIND>::T* x,
                                  const typename nl_elem<KIND>::T* gamma,
                                  typename nl_elem<KIND>::T* y, typename nl_elem<KIND>::T* xhat,
                                  typename nl_elem<KIND>::T* rstd,
                                  const typename nl_elem<KIND>::T* residual,
                                  typename nl_elem<KIND>::T* total, int M, int D, float eps) {
    typedef nl_elem<KIND> E;
    __shared__ float shared[NL_NORM_THREADS];
    for (int row = blockIdx.x; row < M; row += gridDim.x) {
        const long long base = (long long)row * D;
        float q = 0.0f;
        for (int j = threadIdx.x; j < D; j += NL_NORM_THREADS) {
            float v = E::load(x, base + j);
            if (residual) {
                E::store(total, base + j, v + E::load(residual, base + j));
                v = E::load(total, base + j);
            }
            q += v * v;
        }
        const float inv = 1.0f / sqrtf(nl_norm_block_sum(q, shared) / (float)D + eps);
        const typename E::T* in = residual ? total : x;
        for (int j = threadIdx.x; j < D; j += NL_NORM_THREADS) {
            const float h = E::load(in, base + j) * inv;
            if (xhat) E::store(xhat, base + j, h);
            E::store(y, base + j, E::load(gamma, j) * h);
        }
        if (threadIdx.x == 0) E::store(rstd, row, inv);
    }
}

// RMSNorm data gradient, one block per row: b = mean(dy * gamma * xhat),
// dx = rstd * (dy * gamma - xhat * b) (+ residual when given).
template <int KIND>
__device__ void nl_rms_bprop_impl(const typename nl_elem<KIND>::T* dy,
                                  const typename nl_elem<KIND>::T* xhat,
                                  const typename nl_elem<KIND>::T* rstd,
                                  const typename nl_elem<KIND>::T* gamma,
                                  typename nl_elem<KIND>::T* dx, typename nl_elem<KIND>::T* dgamma,
                                  const typename nl_elem<KIND>::T* residual, int M, int D) {
    typedef nl_elem<KIND> E;
    __shared__ float shared[NL_NORM_THREADS];
    for (int row = blockIdx.x; row < M; row += gridDim.x) {
        const long long base = (long long)row * D;
        float sb = 0.0f;
        for (int j = threadIdx.x; j < D; j += NL_NORM_THREADS)
            sb += E::load(dy, base + j) * E::load(gamma, j) * E::load(xhat, base + j);
        const float b = nl_norm_block_sum(sb, shared) / (float)D;
        const float inv = E::load(rstd, row);
        for (int j = threadIdx.x; j < D; j += NL_NORM_THREADS) {
            const float g = E::load(dy, base + j) * E::load(gamma, j);
            float v = inv * (g - E::load(xhat, base + j) * b);
            if (residual) v += E::load(residual, base + j);
            E::store(dx, base + j, v);
        }
    }
}

// RMSNorm gain gradient, one thread per column (grid-stride): dgamma[c] += the sum over rows of
// dy * xhat, in row order (deterministic; neighbouring threads read neighbouring columns).
template <int KIND>
__device__ void nl_rms_dgamma_impl(const typename nl_elem<KIND>::T* dy,
                                   const typename nl_elem<KIND>::T* xhat,
                                   const typename nl_elem<KIND>::T* rstd,
                                   const typename nl_elem<KIND>::T* gamma,
                                   typename nl_elem<KIND>::T* dx,
                                   typename nl_elem<KIND>::T* dgamma,
                                   const typename nl_elem<KIND>::T* residual, int M, int D) {
    typedef nl_elem<KIND> E;
    NL_FOR(c, D) {
        float s = 0.0f;
        for (int row = 0; row < M; ++row) {
            const long long i = (long long)row * D + c;
            s += E::load(dy, i) * E::load(xhat, i);
        }
        E::store(dgamma, c, E::load(dgamma, c) + s);
    }
}

#define RMS_FPROP_PARAMS(T) const T* x, const T* gamma, T* y, T* xhat, T* rstd, \
    const T* residual, T* total, int M, int D, float eps
NL_THREE_TYPES(nl_rms_fprop, RMS_FPROP_PARAMS, (x, gamma, y, xhat, rstd, residual, total, M, D,
                                                eps))
#define RMS_BPROP_PARAMS(T) const T* dy, const T* xhat, const T* rstd, const T* gamma, T* dx, \
    T* dgamma, const T* residual, int M, int D
NL_THREE_TYPES(nl_rms_bprop, RMS_BPROP_PARAMS, (dy, xhat, rstd, gamma, dx, dgamma, residual, M,
                                                D))
NL_THREE_TYPES(nl_rms_dgamma, RMS_BPROP_PARAMS, (dy, xhat, rstd, gamma, dx, dgamma, residual,
                                                 M, D))
