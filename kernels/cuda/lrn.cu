// Local response normalization across the channels of rows (M, C), one thread per element in
// a grid-stride loop (kernels/cpu/lrn.h states the equations; backends/numpy_lrn.py is the
// reference).  Arithmetic in float32 whatever the storage.
#include "neonlite_common.cuh"

template <int KIND>
__device__ void nl_lrn_fprop_impl(const typename nl_elem<KIND>::T* x,
                                  typename nl_elem<KIND>::T* y,
                                  typename nl_elem<KIND>::T* scale, int M, int C, int depth,
                                  float alpha, float beta, float k) {
    typedef nl_elem<KIND> E;
    NL_FOR(i, (long long)M * C) {
        const long long row = i / C * C;
        const int c = (int)(i % C);
        const int lo = max(0, c - depth / 2), hi = min(C - 1, c + (depth - 1) / 2);
        float sum = 0.0f;
        for (int j = lo; j <= hi; ++j) {
            const float v = E::load(x, row + j);
            sum += v * v;
        }
        const float s = k + alpha / depth * sum;
        E::store(scale, i, s);
        E::store(y, i, E::load(x, i) * powf(s, -beta));
    }
}

template <int KIND>
__device__ void nl_lrn_bprop_impl(const typename nl_elem<KIND>::T* x,
                                  const typename nl_elem<KIND>::T* scale,
                                  const typename nl_elem<KIND>::T* dy,
                                  typename nl_elem<KIND>::T* dx, int M, int C, int depth,
                                  float alpha, float beta) {
    typedef nl_elem<KIND> E;
    NL_FOR(i, (long long)M * C) {
        const long long row = i / C * C;
        const int c = (int)(i % C);
        const int lo = max(0, c - (depth - 1) / 2), hi = min(C - 1, c + depth / 2);
        float sum = 0.0f;
        for (int j = lo; j <= hi; ++j)
            sum += E::load(dy, row + j) * E::load(x, row + j)
                   * powf(E::load(scale, row + j), -beta - 1.0f);
        E::store(dx, i, E::load(dy, i) * powf(E::load(scale, i), -beta)
                        - 2.0f * alpha * beta / depth * E::load(x, i) * sum);
    }
}

#define LRN_FPROP_PARAMS(T) const T* x, T* y, T* scale, int M, int C, int depth, float alpha, \
    float beta, float k
NL_THREE_TYPES(nl_lrn_fprop, LRN_FPROP_PARAMS, (x, y, scale, M, C, depth, alpha, beta, k))
#define LRN_BPROP_PARAMS(T) const T* x, const T* scale, const T* dy, T* dx, int M, int C, \
    int depth, float alpha, float beta
NL_THREE_TYPES(nl_lrn_bprop, LRN_BPROP_PARAMS, (x, scale, dy, dx, M, C, depth, alpha, beta))
