// Convolution's documented slower path (until implicit-GEMM kernels land): gather patches, run
// one cuBLAS GEMM, scatter the data gradient back.  Layouts: x (N, H, W, C) NHWC; patches
// (N*P*Q, R*S*C) with column (r*S + s)*C + c; the filter (R, S, C, K) is then a (R*S*C, K)
// matrix.  Output position p reads input row h = p*str_h - pad_h + r*dil_h (0 outside).
#include "neonlite_common.cuh"

struct nl_conv_dims {
    int N, H, W, C, P, Q, R, S, pad_h, pad_w, str_h, str_w, dil_h, dil_w;
};

// patches[(n*P + p)*Q + q][(r*S + s)*C + c] = x[n][h][w][c] or 0 in the padding.
template <int KIND>
__device__ void nl_im2col_impl(typename nl_elem<KIND>::T* patches,
                               const typename nl_elem<KIND>::T* x, nl_conv_dims d) {
    const long long cols = (long long)d.R * d.S * d.C;
    const long long total = (long long)d.N * d.P * d.Q * cols;
    NL_FOR(i, total) {
        long long row = i / cols;
        int col = (int)(i - row * cols);
        int c = col % d.C, rs = col / d.C, s = rs % d.S, r = rs / d.S;
        int q = (int)(row % d.Q);
        long long np = row / d.Q;
        int p = (int)(np % d.P), n = (int)(np / d.P);
        int h = p * d.str_h - d.pad_h + r * d.dil_h, w = q * d.str_w - d.pad_w + s * d.dil_w;
        typename nl_elem<KIND>::T v = 0;
        if (h >= 0 && h < d.H && w >= 0 && w < d.W)
            v = x[(((long long)n * d.H + h) * d.W + w) * d.C + c];
        patches[i] = v;
    }
}

// grad_x[n][h][w][c] = beta * grad_x + sum over taps (r, s) whose output position (p, q) is
// whole and inside the output of dpatches[(n*P + p)*Q + q][(r*S + s)*C + c].  A gather (one
// thread per input element), so the sum order is fixed: deterministic, no atomics.
template <int KIND>
__device__ void nl_col2im_impl(typename nl_elem<KIND>::T* grad_x,
                               const typename nl_elem<KIND>::T* dpatches, nl_conv_dims d,
                               float beta) {
    typedef nl_elem<KIND> E;
    const long long total = (long long)d.N * d.H * d.W * d.C;
    const long long cols = (long long)d.R * d.S * d.C;
    NL_FOR(i, total) {
        int c = (int)(i % d.C);
        long long t = i / d.C;
        int w = (int)(t % d.W);
        t /= d.W;
        int h = (int)(t % d.H), n = (int)(t / d.H);
        float acc = 0.0f;
        for (int r = 0; r < d.R; ++r) {
            int ph = h + d.pad_h - r * d.dil_h;
            if (ph < 0 || ph % d.str_h) continue;
            int p = ph / d.str_h;
            if (p >= d.P) continue;
            for (int s = 0; s < d.S; ++s) {
                int qw = w + d.pad_w - s * d.dil_w;
                if (qw < 0 || qw % d.str_w) continue;
                int q = qw / d.str_w;
                if (q >= d.Q) continue;
                long long row = ((long long)n * d.P + p) * d.Q + q;
                acc += E::load(dpatches, row * cols + ((long long)r * d.S + s) * d.C + c);
            }
        }
        if (beta != 0.0f) acc += beta * E::load(grad_x, i);
        E::store(grad_x, i, acc);
    }
}

#define IM2COL_PARAMS(T) T* patches, const T* x, nl_conv_dims d
NL_THREE_TYPES(nl_im2col, IM2COL_PARAMS, (patches, x, d))
#define COL2IM_PARAMS(T) T* grad_x, const T* dpatches, nl_conv_dims d, float beta
NL_THREE_TYPES(nl_col2im, COL2IM_PARAMS, (grad_x, dpatches, d, beta))
