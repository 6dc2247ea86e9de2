/* The VDPBF16PS (AVX512-BF16) micro-kernel of gemm_bf16.c: a 12 x 32 block of C in 24
 * registers; per pair of k, two B vectors (32 columns x 2 k) and twelve broadcast A pairs.
 *
 * A panel (MR rows m0.., kcp of k), one 32-bit lane per (row, pair of k):
 *     ap[(k / 2) * MR + r] = op(A)(m0 + r, k0 + k) | op(A)(m0 + r, k0 + k + 1) << 16
 * (the lower half is the even k, as VDPBF16PS pairs them); rows past mr are zero. */
#ifndef NEONLITE_GEMM_BF16_AVX512_H
#define NEONLITE_GEMM_BF16_AVX512_H

#include <immintrin.h>

#include "gemm_bf16_pack.h"

#define NL_MR 12
#define NL_NR 32
#define NL_KALIGN 2

#if defined(__AVX512BF16__)
#define NL_BUILT 1

static void nl_pack_a(const uint16_t *restrict A, int64_t lda, int transA, int64_t m0,
                      int64_t mr, int64_t k0, int64_t kc, int64_t kcp, uint16_t *restrict out)
{
    uint32_t *restrict ap = (uint32_t *)out;
    for (int64_t kp = 0; kp < kcp / 2; kp++) {
        const int64_t k = 2 * kp;
        for (int64_t r = 0; r < NL_MR; r++) {
            uint32_t lo = 0, hi = 0;
            if (r < mr && k < kc)
                lo = nl_at(A, lda, transA, m0 + r, k0 + k);
            if (r < mr && k + 1 < kc)
                hi = nl_at(A, lda, transA, m0 + r, k0 + k + 1);
            ap[kp * NL_MR + r] = lo | hi << 16;
        }
    }
}

/* C block (mr x nr at c, row stride ldc) = alpha * (packed A panel @ packed B panel) +
 * beta * C block (first k block; beta == 0 reads nothing), or += alpha * (...) after it. */
static void nl_micro(int64_t kcp, const uint16_t *restrict apanel, const uint16_t *restrict bp,
                     float *c, int64_t ldc, int64_t mr, int64_t nr, float alpha, float beta,
                     int first)
{
    const uint32_t *restrict ap = (const uint32_t *)apanel;
    __m512 acc[NL_MR][2];
    #pragma GCC unroll 12
    for (int r = 0; r < NL_MR; r++)
        acc[r][0] = acc[r][1] = _mm512_setzero_ps();
    for (int64_t kp = 0; kp < kcp / 2; kp++) {
        const __m512bh b0 = (__m512bh)_mm512_load_si512((const void *)(bp + kp * 2 * NL_NR));
        const __m512bh b1 = (__m512bh)_mm512_load_si512((const void *)(bp + kp * 2 * NL_NR
                                                                       + 32));
        #pragma GCC unroll 12
        for (int r = 0; r < NL_MR; r++) {
            const __m512bh a = (__m512bh)_mm512_set1_epi32((int)ap[kp * NL_MR + r]);
            acc[r][0] = _mm512_dpbf16_ps(acc[r][0], a, b0);
            acc[r][1] = _mm512_dpbf16_ps(acc[r][1], a, b1);
        }
    }
    const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
    #pragma GCC unroll 12
    for (int r = 0; r < NL_MR; r++) {
        if (r >= mr)
            break;
        for (int h = 0; h < 2; h++) {
            const int64_t cols = nr - 16 * h;
            if (cols <= 0)
                break;
            const __mmask16 m = cols >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << cols) - 1);
            float *p = c + r * ldc + 16 * h;
            __m512 v = _mm512_mul_ps(va, acc[r][h]);
            if (!first)
                v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, p));
            else if (beta != 0.0f)
                v = _mm512_add_ps(v, _mm512_mul_ps(vb, _mm512_maskz_loadu_ps(m, p)));
            _mm512_mask_storeu_ps(p, m, v);
        }
    }
}

static void nl_thread_begin(void) {}
static void nl_thread_end(void) {}

/* 16 chains of VDPBF16PS on one thread for iters rounds; returns a value that depends on
 * every chain (so none is optimized away). */
static float nl_peak_chains(long iters)
{
    const __m512bh a = (__m512bh)_mm512_set1_epi32(0x3F803F80);  /* (1, 1) */
    const __m512bh b = (__m512bh)_mm512_set1_epi32(0x3A833A83);  /* (~1e-3, ~1e-3) */
    __m512 acc[16];
    /* each chain starts from its own value, so the compiler cannot merge identical chains */
    #pragma GCC unroll 16
    for (int i = 0; i < 16; i++)
        acc[i] = _mm512_set1_ps((float)(i + 1));
    for (long n = 0; n < iters; n++) {
        #pragma GCC unroll 16
        for (int i = 0; i < 16; i++)
            acc[i] = _mm512_dpbf16_ps(acc[i], a, b);
    }
    __m512 sum = acc[0];
    for (int i = 1; i < 16; i++)
        sum = _mm512_add_ps(sum, acc[i]);
    return _mm512_reduce_add_ps(sum);
}
#define NL_PEAK_FLOP_PER_ITER (16.0 * 64.0)

#else
#define NL_BUILT 0
#endif
#endif
