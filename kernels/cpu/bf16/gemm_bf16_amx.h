/* The AMX-BF16 (TDPBF16PS) micro-kernel of gemm_bf16.c: a 32 x 32 block of C in four 16 x 16
 * float32 tiles (tmm0-3), two A tiles (tmm4-5: 16 rows x 32 k) and two B tiles (tmm6-7: 16
 * pairs of k x 16 columns, read from the packed B panel with a 128-byte stride).  Compiled
 * with the AMX target on its functions only (the rest of the module stays -march=native);
 * called only where kernels/cpu_features.py found amx_tile + amx_bf16 and Linux granted the
 * tile state (arch_prctl).  With -DNL_AMX_EMULATED (the gemm_bf16_amx_emulated variant, for
 * tests) the tile instructions are amx_emulated.h's C instead, on any CPU.
 *
 * A panel (MR rows m0.., kcp of k, kcp a multiple of 32), row-major:
 *     ap[r * kcp + k] = op(A)(m0 + r, k0 + k); rows past mr, k past kc are zero. */
#ifndef NEONLITE_GEMM_BF16_AMX_H
#define NEONLITE_GEMM_BF16_AMX_H

#include <string.h>

#include "gemm_bf16_pack.h"

#define NL_MR 32
#define NL_NR 32
#define NL_KALIGN 32

#if defined(NL_AMX_EMULATED)
#define NL_BUILT 1
#define NL_AMX
#include "amx_emulated.h"
#elif (defined(__clang__) && __clang_major__ >= 12) || \
    (!defined(__clang__) && defined(__GNUC__) && __GNUC__ >= 11)
#define NL_BUILT 1
#define NL_AMX __attribute__((target("amx-tile,amx-bf16,avx512f")))
#include <immintrin.h>
#define NL_TILE_LOADCONFIG(config) _tile_loadconfig(config)
#define NL_TILE_RELEASE() _tile_release()
#define NL_TILE_ZERO(t) _tile_zero(t)
#define NL_TILE_LOADD(t, base, stride) _tile_loadd(t, base, stride)
#define NL_TILE_STORED(t, base, stride) _tile_stored(t, base, stride)
#define NL_TILE_DPBF16PS(c, a, b) _tile_dpbf16ps(c, a, b)
#endif

#ifdef NL_BUILT

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
    NL_TILE_LOADCONFIG(&cfg);
}

NL_AMX static void nl_thread_end(void) { NL_TILE_RELEASE(); }

NL_AMX static void nl_micro(int64_t kcp, const uint16_t *restrict ap,
                            const uint16_t *restrict bp, float *c, int64_t ldc, int64_t mr,
                            int64_t nr, float alpha, float beta, int first)
{
    float block[NL_MR * NL_NR] __attribute__((aligned(64)));
    NL_TILE_ZERO(0);
    NL_TILE_ZERO(1);
    NL_TILE_ZERO(2);
    NL_TILE_ZERO(3);
    for (int64_t k = 0; k < kcp; k += 32) {
        NL_TILE_LOADD(4, ap + k, kcp * 2);
        NL_TILE_LOADD(5, ap + 16 * kcp + k, kcp * 2);
        NL_TILE_LOADD(6, bp + (k / 2) * 2 * NL_NR, 2 * NL_NR * 2);
        NL_TILE_LOADD(7, bp + (k / 2) * 2 * NL_NR + 32, 2 * NL_NR * 2);
        NL_TILE_DPBF16PS(0, 4, 6);
        NL_TILE_DPBF16PS(1, 4, 7);
        NL_TILE_DPBF16PS(2, 5, 6);
        NL_TILE_DPBF16PS(3, 5, 7);
    }
    NL_TILE_STORED(0, block, NL_NR * 4);
    NL_TILE_STORED(1, block + 16, NL_NR * 4);
    NL_TILE_STORED(2, block + 16 * NL_NR, NL_NR * 4);
    NL_TILE_STORED(3, block + 16 * NL_NR + 16, NL_NR * 4);
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
    NL_TILE_ZERO(0);
    NL_TILE_ZERO(1);
    NL_TILE_ZERO(2);
    NL_TILE_ZERO(3);
    NL_TILE_ZERO(4);
    NL_TILE_ZERO(5);
    NL_TILE_ZERO(6);
    NL_TILE_ZERO(7);
    for (long n = 0; n < iters; n++) {
        NL_TILE_DPBF16PS(0, 4, 6);
        NL_TILE_DPBF16PS(1, 4, 7);
        NL_TILE_DPBF16PS(2, 5, 6);
        NL_TILE_DPBF16PS(3, 5, 7);
    }
    float out[16 * 16] __attribute__((aligned(64)));
    NL_TILE_STORED(0, out, 64);
    return out[0];
}
#define NL_PEAK_FLOP_PER_ITER (4.0 * 16 * 16 * 32 * 2)

#else
#define NL_BUILT 0
#endif
#endif
