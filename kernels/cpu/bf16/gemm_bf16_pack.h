/* Packing of the bf16 GEMM's operands (gemm_bf16.c), shared by its VDPBF16PS and AMX
 * micro-kernels.  bf16 values are uint16 bit patterns; K is padded with zeros to a multiple
 * of NL_KALIGN (2: one pair per 32-bit lane; AMX: 32, one tile's depth).
 *
 * B panel (NR columns n0..n0+NR-1, kc rows k0..k0+kc-1), the layout both instructions read
 * (pairs of consecutive k side by side in each 32-bit lane):
 *     bp[(k / 2) * 2 * NR + j * 2 + (k % 2)] = op(B)(k0 + k, n0 + j)
 * rows past kc and columns past the matrix are zero.
 */
#ifndef NEONLITE_GEMM_BF16_PACK_H
#define NEONLITE_GEMM_BF16_PACK_H

#include <stdint.h>

/* op(X)(r, c) of a bf16 matrix with row stride ld, transposed when `trans` */
static inline uint16_t nl_at(const uint16_t *X, int64_t ld, int trans, int64_t r, int64_t c)
{
    return trans ? X[c * ld + r] : X[r * ld + c];
}

static void nl_pack_b(const uint16_t *restrict B, int64_t ldb, int transB, int64_t k0,
                      int64_t kc, int64_t kcp, int64_t n0, int64_t nr, int64_t NR,
                      uint16_t *restrict bp)
{
    for (int64_t k = 0; k < kcp; k++) {
        uint16_t *row = bp + (k / 2) * 2 * NR + (k % 2);
        if (k >= kc) {
            for (int64_t j = 0; j < NR; j++)
                row[2 * j] = 0;
            continue;
        }
        if (!transB) {
            const uint16_t *src = B + (k0 + k) * ldb + n0;
            for (int64_t j = 0; j < nr; j++)
                row[2 * j] = src[j];
        } else {
            for (int64_t j = 0; j < nr; j++)
                row[2 * j] = B[(n0 + j) * ldb + k0 + k];
        }
        for (int64_t j = nr; j < NR; j++)
            row[2 * j] = 0;
    }
}

#endif
