/* The small dense products of the block-sparse attention kernels (blocksparse.c includes this
 * file; it is not a cffi header): small_gemm, C (m x n, ldc) = alpha * A (m x K, lda) @
 * B (K x n, ldb) + beta * C for m a multiple of 8, and transpose_block.  Needs common.h (the
 * element type real, memcpy) first. */
#ifndef NEONLITE_BLOCKSPARSE_GEMM_H
#define NEONLITE_BLOCKSPARSE_GEMM_H

#ifndef NL_PRAGMA
#define NL_PRAGMA(x) _Pragma(#x)
#endif

/* The register file the tiles are sized for: with AVX-512, 32 registers of 64 bytes; without
 * (AVX2: AMD Zen 2 and 3, Intel client parts), 16 of 32 bytes.  BS_ACC and BS_UPDATE_ACC:
 * the accumulator registers of a weight-product tile and of a weight-gradient tile (the rest
 * hold the broadcast input and the loads); BS_SMALL_NVEC: vectors per row of small_gemm's
 * 8-row tiles.  Every element is summed in the same order whatever the tile, so the results
 * are the same bits with either. */
#ifdef __AVX512F__
#define BS_VEC_BYTES 64
#define BS_ACC 24
#define BS_UPDATE_ACC 16
#define BS_SMALL_NVEC 2
#else
#define BS_VEC_BYTES 32
#define BS_ACC 12
#define BS_UPDATE_ACC 8
#define BS_SMALL_NVEC 1
#endif

/* Small dense products for the attention blocks: C (m x n, ldc) = alpha * A (m x K, lda) @
 * B (K x n, ldb) + beta * C, m a multiple of 8, in register tiles of 8 rows x BS_SMALL_NVEC
 * or 1 vectors; columns past the last whole vector take a scalar loop. */
typedef real vfull __attribute__((vector_size(BS_VEC_BYTES)));
#define VF ((int)(BS_VEC_BYTES / (int)sizeof(real)))

static inline vfull vload(const real *p)
{
    vfull v;
    memcpy(&v, p, sizeof v);
    return v;
}

#define DEFINE_MICRO(NVEC)                                                                     \
static inline void micro_##NVEC(const real *restrict A, int64_t lda, const real *restrict B,  \
                                int64_t ldb, int64_t K, real *restrict C, int64_t ldc,        \
                                real alpha, real beta)                                        \
{                                                                                              \
    vfull acc[8][NVEC];                                                                        \
    NL_PRAGMA(GCC unroll 8)                                                                    \
    for (int i = 0; i < 8; i++)                                                                \
        NL_PRAGMA(GCC unroll 2)                                                                \
        for (int v = 0; v < NVEC; v++)                                                         \
            acc[i][v] = (vfull){0};                                                            \
    for (int64_t q = 0; q < K; q++) {                                                          \
        vfull b[NVEC];                                                                         \
        NL_PRAGMA(GCC unroll 2)                                                                \
        for (int v = 0; v < NVEC; v++)                                                         \
            b[v] = vload(B + q * ldb + v * VF);                                                \
        NL_PRAGMA(GCC unroll 8)                                                                \
        for (int i = 0; i < 8; i++) {                                                          \
            const real a = A[i * lda + q];                                                     \
            NL_PRAGMA(GCC unroll 2)                                                            \
            for (int v = 0; v < NVEC; v++)                                                     \
                acc[i][v] += a * b[v];                                                         \
        }                                                                                      \
    }                                                                                          \
    NL_PRAGMA(GCC unroll 8)                                                                    \
    for (int i = 0; i < 8; i++)                                                                \
        NL_PRAGMA(GCC unroll 2)                                                                \
        for (int v = 0; v < NVEC; v++) {                                                       \
            vfull out = alpha * acc[i][v];                                                     \
            if (beta != 0)                                                                     \
                out += beta * vload(C + i * ldc + v * VF);                                     \
            memcpy(C + i * ldc + v * VF, &out, sizeof out);                                    \
        }                                                                                      \
}
DEFINE_MICRO(1)
DEFINE_MICRO(2)

static void small_gemm(const real *A, int64_t lda, const real *B, int64_t ldb, int64_t m,
                       int64_t n, int64_t K, real *C, int64_t ldc, real alpha, real beta)
{
    for (int64_t i0 = 0; i0 < m; i0 += 8) {
        const real *a = A + i0 * lda;
        real *c = C + i0 * ldc;
        int64_t j = 0;
        for (; BS_SMALL_NVEC == 2 && j + 2 * VF <= n; j += 2 * VF)
            micro_2(a, lda, B + j, ldb, K, c + j, ldc, alpha, beta);
        for (; j + VF <= n; j += VF)
            micro_1(a, lda, B + j, ldb, K, c + j, ldc, alpha, beta);
        for (; j < n; j++)
            for (int64_t i = 0; i < 8; i++) {
                real sum = 0;
                for (int64_t q = 0; q < K; q++)
                    sum += a[i * lda + q] * B[q * ldb + j];
                c[i * ldc + j] = alpha * sum + (beta != 0 ? beta * c[i * ldc + j] : 0);
            }
    }
}

static void transpose_block(const real *src, int64_t rows, int64_t cols, int64_t ld, real *dst)
{
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++)
            dst[c * rows + r] = src[r * ld + c];
}

#endif
