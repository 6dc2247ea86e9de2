/* The AMX-BF16 (TDPBF16PS) micro-kernel of gemm_bf16.c: a 32 x 32 block of C in four 16 x 16
 * float32 tiles (tmm0-3), two A tiles (tmm4-5: 16 rows x 32 k) and two B tiles (tmm6-7: 16
 * pairs of k x 16 columns, read from the packed B panel with a 128-byte stride).  Compiled
 * with the AMX target on its functions only (the rest of the module stays -march=native);
 * called only where kernels/cpu_features.py found amx_tile + amx_bf16 and Linux granted the
 * tile state (arch_prctl).
 *
 * A panel (MR rows m0.., kcp of k, kcp a multiple of 32), row-major:
 *     ap[r * kcp + k] = op(A)(m0 + r, k0 + k); rows past mr, k past kc are zero. */
#ifndef NEONLITE_GEMM_BF16_AMX_H
#define NEONLITE_GEMM_BF16_AMX_H

#include <immintrin.h>

#include "gemm_bf16_pack.h"

#define NL_MR 32
#define NL_NR 32
#define NL_KALIGN 32

#if (defined(__clang__) && __clang_major__ >= 12) || \
    (!defined(__clang__) && defined(__GNUC__) && __GNUC__ >= 11)
#define NL_BUILT 1
#define NL_AMX __attribute__((target("amx-tile,amx-bf16,avx512f")))

static void nl_pack_a(const uint16_t *restrict A, int64_t lda, int transA, int64_t m0,
                      int64_t mr, int64_t k0, int64_t kc, int64_t kcp, uint16_t *restrict ap)
{
    for (int64_t r = 0; r < NL_MR; r++)
        for (int64_t k = 0; k < kcp; k++)
            ap[r * kcp + k] = (r < mr && k < kc) ? nl_at(A, lda, transA, m0 + r, k0 + k) : 0;
}

/* the tile configuration: palette 1, every tile 16 rows of 64 bytes */
typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} nl_tile_config;

NL_AMX static void nl_thread_begin(void)
{
    nl_tile_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 8; t++) {
        cfg.colsb[t] = 64;
        cfg.rows[t] = 16;
    }
    _tile_loadconfig(&cfg);
}

NL_AMX static void nl_thread_end(void) { _tile_release(); }

NL_AMX static void nl_micro(int64_t kcp, const uint16_t *restrict ap,
                            const uint16_t *restrict bp, float *c, int64_t ldc, int64_t mr,
                            int64_t nr, float alpha, float beta, int first)
{
    float block[NL_MR * NL_NR] __attribute__((aligned(64)));
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    for (int64_t k = 0; k < kcp; k += 32) {
        _tile_loadd(4, ap + k, kcp * 2);
        _tile_loadd(5, ap + 16 * kcp + k, kcp * 2);
        _tile_loadd(6, bp + (k / 2) * 2 * NL_NR, 2 * NL_NR * 2);
        _tile_loadd(7, bp + (k / 2) * 2 * NL_NR + 32, 2 * NL_NR * 2);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
    _tile_stored(0, block, NL_NR * 4);
    _tile_stored(1, block + 16, NL_NR * 4);
    _tile_stored(2, block + 16 * NL_NR, NL_NR * 4);
    _tile_stored(3, block + 16 * NL_NR + 16, NL_NR * 4);
    for (int64_t r = 0; r < mr; r++)
        for (int64_t j = 0; j < nr; j++) {
            float v = alpha * block[r * NL_NR + j];
            float *p = c + r * ldc + j;
            if (!first)
                v = v + *p;
            else if (beta != 0.0f)
                v = v + beta * *p;
            *p = v;
        }
}

/* four TDPBF16PS chains (one per C tile) for iters rounds on zero tiles */
NL_AMX static float nl_peak_chains(long iters)
{
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    _tile_zero(4);
    _tile_zero(5);
    _tile_zero(6);
    _tile_zero(7);
    for (long n = 0; n < iters; n++) {
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
    float out[16 * 16] __attribute__((aligned(64)));
    _tile_stored(0, out, 64);
    return out[0];
}
#define NL_PEAK_FLOP_PER_ITER (4.0 * 16 * 16 * 32 * 2)

#else
#define NL_BUILT 0
#endif
#endif
