// Max and average pooling on NHWC: x (N, H, W, C) -> y (N, P, Q, C), windows R x S with
// stride and padding (overlap allowed).  Max pooling records the winning tap r*S + s per output
// (first maximum wins, as on the CPU backend; padding never wins); average pooling divides by
// the number of non-padding inputs of each window.  Backward passes are gathers (one thread per
// input element): deterministic, no atomics.
#include "neonlite_common.cuh"

struct nl_pool_dims {
    int N, H, W, C, P, Q, R, S, pad_h, pad_w, str_h, str_w;
};

__device__ __forceinline__ int nl_window_count(const nl_pool_dims& d, int p, int q) {
    int h0 = p * d.str_h - d.pad_h, w0 = q * d.str_w - d.pad_w;
    int rows = min(h0 + d.R, d.H) - max(h0, 0), cols = min(w0 + d.S, d.W) - max(w0, 0);
    return rows * cols;
}

template <int KIND>
__device__ void nl_pool_fprop_impl(typename nl_elem<KIND>::T* y,
                                   const typename nl_elem<KIND>::T* x, int* argmax,
                                   nl_pool_dims d, int is_max) {
    typedef nl_elem<KIND> E;
    const long long total = (long long)d.N * d.P * d.Q * d.C;
    NL_FOR(i, total) {
        int c = (int)(i % d.C);
        long long t = i / d.C;
        int q = (int)(t % d.Q);
        t /= d.Q;
        int p = (int)(t % d.P), n = (int)(t / d.P);
        int h0 = p * d.str_h - d.pad_h, w0 = q * d.str_w - d.pad_w;
        float best = -INFINITY, sum = 0.0f;
        int best_tap = 0;
        bool first = true;
        for (int r = 0; r < d.R; ++r) {
            int h = h0 + r;
            if (h < 0 || h >= d.H) continue;
            for (int s = 0; s < d.S; ++s) {
                int w = w0 + s;
                if (w < 0 || w >= d.W) continue;
                float v = E::load(x, (((long long)n * d.H + h) * d.W + w) * d.C + c);
                if (first || v > best) { best = v; best_tap = r * d.S + s; first = false; }
                sum += v;
            }
        }
        if (is_max) {
            E::store(y, i, best);
            argmax[i] = best_tap;
        } else {
            E::store(y, i, sum / (float)nl_window_count(d, p, q));
        }
    }
}

template <int KIND>
__device__ void nl_pool_bprop_impl(typename nl_elem<KIND>::T* grad_x,
                                   const typename nl_elem<KIND>::T* e, const int* argmax,
                                   nl_pool_dims d, int is_max, float beta) {
    typedef nl_elem<KIND> E;
    const long long total = (long long)d.N * d.H * d.W * d.C;
    NL_FOR(i, total) {
        int c = (int)(i % d.C);
        long long t = i / d.C;
        int w = (int)(t % d.W);
        t /= d.W;
        int h = (int)(t % d.H), n = (int)(t / d.H);
        // outputs whose window holds row h: p*str_h - pad_h <= h < p*str_h - pad_h + R
        int p_lo = max(0, (h + d.pad_h - d.R + d.str_h) / d.str_h);
        int p_hi = min(d.P - 1, (h + d.pad_h) / d.str_h);
        int q_lo = max(0, (w + d.pad_w - d.S + d.str_w) / d.str_w);
        int q_hi = min(d.Q - 1, (w + d.pad_w) / d.str_w);
        float acc = 0.0f;
        for (int p = p_lo; p <= p_hi; ++p) {
            int r = h - (p * d.str_h - d.pad_h);
            if (r < 0 || r >= d.R) continue;
            for (int q = q_lo; q <= q_hi; ++q) {
                int s = w - (q * d.str_w - d.pad_w);
                if (s < 0 || s >= d.S) continue;
                long long o = (((long long)n * d.P + p) * d.Q + q) * d.C + c;
                if (is_max) {
                    if (argmax[o] == r * d.S + s) acc += E::load(e, o);
                } else {
                    acc += E::load(e, o) / (float)nl_window_count(d, p, q);
                }
            }
        }
        if (beta != 0.0f) acc += beta * E::load(grad_x, i);
        E::store(grad_x, i, acc);
    }
}

#define POOL_FPROP_PARAMS(T) T* y, const T* x, int* argmax, nl_pool_dims d, int is_max
NL_THREE_TYPES(nl_pool_fprop, POOL_FPROP_PARAMS, (y, x, argmax, d, is_max))
#define POOL_BPROP_PARAMS(T) T* grad_x, const T* e, const int* argmax, nl_pool_dims d, \
    int is_max, float beta
NL_THREE_TYPES(nl_pool_bprop, POOL_BPROP_PARAMS, (grad_x, e, argmax, d, is_max, beta))
