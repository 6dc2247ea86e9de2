// The recurrent gate kernels: one time step of a cell after its recurrent GEMM, one thread
// per (row n, unit j) of the (N, H) state in a grid-stride loop.  The equations, argument
// meanings and NULL conventions are those of kernels/cpu/recurrent.h (reference:
// backends/numpy_recurrent.py).  act / gate_act: 0 tanh, 1 logistic, 2 relu, 3 identity.
// Arithmetic in float32 whatever the storage.
#include "neonlite_common.cuh"

__device__ __forceinline__ float nl_rnn_act(int act, float x) {
    if (act == 0) return tanhf(x);
    if (act == 1) return nl_sig(x);
    if (act == 2) return x > 0.0f ? x : 0.0f;
    return x;
}

// The derivative from the output y = act(x).
__device__ __forceinline__ float nl_rnn_slope(int act, float y) {
    if (act == 0) return 1.0f - y * y;
    if (act == 1) return y * (1.0f - y);
    if (act == 2) return y > 0.0f ? 1.0f : 0.0f;
    return 1.0f;
}

template <typename E>
__device__ __forceinline__ bool nl_real_row(const typename E::T* mask, long long n) {
    return mask == 0 || E::load(mask, n) != 0.0f;
}

template <typename E>
__device__ __forceinline__ float nl_opt(const typename E::T* p, long long i) {
    return p == 0 ? 0.0f : E::load(p, i);
}

template <int KIND>
__device__ void nl_rnn_fprop_impl(const typename nl_elem<KIND>::T* xg,
                                  const typename nl_elem<KIND>::T* hg,
                                  const typename nl_elem<KIND>::T* h_prev,
                                  typename nl_elem<KIND>::T* h,
                                  const typename nl_elem<KIND>::T* mask, int N, int H, int act) {
    typedef nl_elem<KIND> E;
    NL_FOR(i, (long long)N * H) {
        const float v = nl_real_row<E>(mask, i / H)
            ? nl_rnn_act(act, E::load(xg, i) + E::load(hg, i)) : E::load(h_prev, i);
        E::store(h, i, v);
    }
}

template <int KIND>
__device__ void nl_rnn_bprop_impl(const typename nl_elem<KIND>::T* h,
                                  const typename nl_elem<KIND>::T* dy,
                                  typename nl_elem<KIND>::T* dh,
                                  typename nl_elem<KIND>::T* dpre,
                                  const typename nl_elem<KIND>::T* mask, int N, int H, int act) {
    typedef nl_elem<KIND> E;
    NL_FOR(i, (long long)N * H) {
        const float total = E::load(dh, i) + nl_opt<E>(dy, i);
        const bool keep = nl_real_row<E>(mask, i / H);
        E::store(dpre, i, keep ? total * nl_rnn_slope(act, E::load(h, i)) : 0.0f);
        E::store(dh, i, keep ? 0.0f : total);
    }
}

template <int KIND>
__device__ void nl_lstm_fprop_impl(typename nl_elem<KIND>::T* gates,
                                   const typename nl_elem<KIND>::T* hg,
                                   const typename nl_elem<KIND>::T* c_prev,
                                   typename nl_elem<KIND>::T* c,
                                   const typename nl_elem<KIND>::T* h_prev,
                                   typename nl_elem<KIND>::T* h,
                                   const typename nl_elem<KIND>::T* mask, int N, int H, int act,
                                   int gate_act) {
    typedef nl_elem<KIND> E;
    NL_FOR(k, (long long)N * H) {
        const long long n = k / H, j = k % H, g0 = n * 4 * H + j;
        const float i = nl_rnn_act(gate_act, E::load(gates, g0) + E::load(hg, g0));
        const float f = nl_rnn_act(gate_act, E::load(gates, g0 + H) + E::load(hg, g0 + H));
        const float g = nl_rnn_act(act, E::load(gates, g0 + 2 * H) + E::load(hg, g0 + 2 * H));
        const float o = nl_rnn_act(gate_act, E::load(gates, g0 + 3 * H) + E::load(hg, g0 + 3 * H));
        E::store(gates, g0, i);
        E::store(gates, g0 + H, f);
        E::store(gates, g0 + 2 * H, g);
        E::store(gates, g0 + 3 * H, o);
        const float cp = E::load(c_prev, k), cell = f * cp + i * g;
        const bool keep = nl_real_row<E>(mask, n);
        E::store(c, k, keep ? cell : cp);
        E::store(h, k, keep ? o * nl_rnn_act(act, cell) : E::load(h_prev, k));
    }
}

template <int KIND>
__device__ void nl_lstm_bprop_impl(const typename nl_elem<KIND>::T* gates,
                                   const typename nl_elem<KIND>::T* c_prev,
                                   const typename nl_elem<KIND>::T* c,
                                   const typename nl_elem<KIND>::T* dy,
                                   typename nl_elem<KIND>::T* dh,
                                   typename nl_elem<KIND>::T* dc,
                                   typename nl_elem<KIND>::T* dgates,
                                   const typename nl_elem<KIND>::T* mask, int N, int H, int act,
                                   int gate_act) {
    typedef nl_elem<KIND> E;
    NL_FOR(k, (long long)N * H) {
        const long long n = k / H, j = k % H, g0 = n * 4 * H + j;
        const float total = E::load(dh, k) + nl_opt<E>(dy, k);
        if (!nl_real_row<E>(mask, n)) {
            E::store(dh, k, total);
            for (int q = 0; q < 4; ++q) E::store(dgates, g0 + q * H, 0.0f);
            continue;
        }
        const float i = E::load(gates, g0), f = E::load(gates, g0 + H);
        const float g = E::load(gates, g0 + 2 * H), o = E::load(gates, g0 + 3 * H);
        const float act_c = nl_rnn_act(act, E::load(c, k));
        const float dcell = E::load(dc, k) + total * o * nl_rnn_slope(act, act_c);
        E::store(dgates, g0, dcell * g * nl_rnn_slope(gate_act, i));
        E::store(dgates, g0 + H, dcell * E::load(c_prev, k) * nl_rnn_slope(gate_act, f));
        E::store(dgates, g0 + 2 * H, dcell * i * nl_rnn_slope(act, g));
        E::store(dgates, g0 + 3 * H, total * act_c * nl_rnn_slope(gate_act, o));
        E::store(dc, k, dcell * f);
        E::store(dh, k, 0.0f);
    }
}

template <int KIND>
__device__ void nl_gru_fprop_impl(typename nl_elem<KIND>::T* gates,
                                  const typename nl_elem<KIND>::T* hg,
                                  const typename nl_elem<KIND>::T* bias_h,
                                  typename nl_elem<KIND>::T* hn,
                                  const typename nl_elem<KIND>::T* h_prev,
                                  typename nl_elem<KIND>::T* h,
                                  const typename nl_elem<KIND>::T* mask, int N, int H) {
    typedef nl_elem<KIND> E;
    NL_FOR(k, (long long)N * H) {
        const long long n = k / H, j = k % H, g0 = n * 3 * H + j;
        const float r = nl_sig(E::load(gates, g0) + E::load(hg, g0) + E::load(bias_h, j));
        const float z = nl_sig(E::load(gates, g0 + H) + E::load(hg, g0 + H)
                               + E::load(bias_h, H + j));
        const float hb = E::load(hg, g0 + 2 * H) + E::load(bias_h, 2 * H + j);
        const float cand = tanhf(E::load(gates, g0 + 2 * H) + r * hb);
        E::store(gates, g0, r);
        E::store(gates, g0 + H, z);
        E::store(gates, g0 + 2 * H, cand);
        E::store(hn, k, hb);
        const float hp = E::load(h_prev, k);
        E::store(h, k, nl_real_row<E>(mask, n) ? (1.0f - z) * cand + z * hp : hp);
    }
}

template <int KIND>
__device__ void nl_gru_bprop_impl(const typename nl_elem<KIND>::T* gates,
                                  const typename nl_elem<KIND>::T* hn,
                                  const typename nl_elem<KIND>::T* h_prev,
                                  const typename nl_elem<KIND>::T* dy,
                                  typename nl_elem<KIND>::T* dh,
                                  typename nl_elem<KIND>::T* dgx,
                                  typename nl_elem<KIND>::T* dgh,
                                  const typename nl_elem<KIND>::T* mask, int N, int H) {
    typedef nl_elem<KIND> E;
    NL_FOR(k, (long long)N * H) {
        const long long n = k / H, j = k % H, g0 = n * 3 * H + j;
        const float total = E::load(dh, k) + nl_opt<E>(dy, k);
        const bool keep = nl_real_row<E>(mask, n);
        const float r = E::load(gates, g0), z = E::load(gates, g0 + H);
        const float cand = E::load(gates, g0 + 2 * H);
        const float dn = keep ? total * (1.0f - z) * (1.0f - cand * cand) : 0.0f;
        const float dz = keep ? total * (E::load(h_prev, k) - cand) * z * (1.0f - z) : 0.0f;
        const float dr = dn * E::load(hn, k) * r * (1.0f - r);
        E::store(dgx, g0, dr);
        E::store(dgh, g0, dr);
        E::store(dgx, g0 + H, dz);
        E::store(dgh, g0 + H, dz);
        E::store(dgx, g0 + 2 * H, dn);
        E::store(dgh, g0 + 2 * H, dn * r);
        E::store(dh, k, keep ? total * z : total);
    }
}

#define RNN_FPROP_PARAMS(T) const T* xg, const T* hg, const T* h_prev, T* h, const T* mask, \
    int N, int H, int act
NL_THREE_TYPES(nl_rnn_fprop, RNN_FPROP_PARAMS, (xg, hg, h_prev, h, mask, N, H, act))
#define RNN_BPROP_PARAMS(T) const T* h, const T* dy, T* dh, T* dpre, const T* mask, int N, \
    int H, int act
NL_THREE_TYPES(nl_rnn_bprop, RNN_BPROP_PARAMS, (h, dy, dh, dpre, mask, N, H, act))
#define LSTM_FPROP_PARAMS(T) T* gates, const T* hg, const T* c_prev, T* c, const T* h_prev, \
    T* h, const T* mask, int N, int H, int act, int gate_act
NL_THREE_TYPES(nl_lstm_fprop, LSTM_FPROP_PARAMS,
               (gates, hg, c_prev, c, h_prev, h, mask, N, H, act, gate_act))
#define LSTM_BPROP_PARAMS(T) const T* gates, const T* c_prev, const T* c, const T* dy, T* dh, \
    T* dc, T* dgates, const T* mask, int N, int H, int act, int gate_act
NL_THREE_TYPES(nl_lstm_bprop, LSTM_BPROP_PARAMS,
               (gates, c_prev, c, dy, dh, dc, dgates, mask, N, H, act, gate_act))
#define GRU_FPROP_PARAMS(T) T* gates, const T* hg, const T* bias_h, T* hn, const T* h_prev, \
    T* h, const T* mask, int N, int H
NL_THREE_TYPES(nl_gru_fprop, GRU_FPROP_PARAMS, (gates, hg, bias_h, hn, h_prev, h, mask, N, H))
#define GRU_BPROP_PARAMS(T) const T* gates, const T* hn, const T* h_prev, const T* dy, T* dh, \
    T* dgx, T* dgh, const T* mask, int N, int H
NL_THREE_TYPES(nl_gru_bprop, GRU_BPROP_PARAMS, (gates, hn, h_prev, dy, dh, dgx, dgh, mask, N, H))
