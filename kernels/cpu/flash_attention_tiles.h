/* The tile steps of the fused attention kernels (flash_attention.c includes this file; it is
 * not a cffi header): vectors of one register (fa_vec, FA_W reals), the small tile GEMM
 * fa_gemm, tile transposes and a row copy (the elementwise math is in
 * flash_attention_math.h, included below).  Needs common.h and flash_attention.h
 * (FA_MAX_BLOCK) first. */
#ifndef NEONLITE_FLASH_ATTENTION_TILES_H
#define NEONLITE_FLASH_ATTENTION_TILES_H

/* FA_FLOAT: 1 when the build's real is float (DTYPE pasted onto FA_IS_: only FA_IS_float is
 * defined), for the float-only AVX-512 forms below. */
#define FA_IS_float 1
#define FA_PASTE2(a, b) a##b
#define FA_PASTE(a, b) FA_PASTE2(a, b)
#if FA_PASTE(FA_IS_, DTYPE)
#define FA_FLOAT 1
#else
#define FA_FLOAT 0
#endif
#if FA_FLOAT && (defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__)))
#include <immintrin.h>
#endif

#ifdef __AVX512F__
#define FA_VEC_BYTES 64
#else
#define FA_VEC_BYTES 32
#endif
typedef real fa_vec __attribute__((vector_size(FA_VEC_BYTES)));
typedef real fa_uvec __attribute__((vector_size(FA_VEC_BYTES), aligned(sizeof(real)), may_alias));
#define FA_W ((int64_t)(FA_VEC_BYTES / sizeof(real)))
#define FA_LD FA_MAX_BLOCK /* leading dimension of the bq x bk tiles */

static inline fa_vec fa_load(const real *p) { return *(const fa_uvec *)p; }
static inline void fa_store(real *p, fa_vec x) { *(fa_uvec *)p = x; }

#include "flash_attention_math.h"

/* The causal band of a tile that the diagonal crosses: query ii (of the tile) sees key c when
 * c - ii <= e.  Which of a product's indices are queries and keys (`kind`):
 *   FA_FULL           no band: every element computed, every term summed;
 *   FA_ROWS_UPTO_COL  rows keys, columns queries (the forward's S^T): blocks of C that are
 *                     hidden entirely are not written;
 *   FA_ROWS_FROM_COL  rows queries, columns keys (the backward's P and dP): the same;
 *   FA_P_UPTO_ROW     rows queries, p keys (P V, dS K): a row block sums over the keys some
 *                     row of it sees;
 *   FA_P_FROM_ROW     rows keys, p queries (P^T dO, dS^T Q): the same over the queries.
 * The terms left out are those of hidden probabilities (exactly 0), so each sum is the same. */
enum { FA_FULL, FA_ROWS_UPTO_COL, FA_ROWS_FROM_COL, FA_P_UPTO_ROW, FA_P_FROM_ROW };
typedef struct {
    int kind;
    int64_t e;
} fa_band;

/* The band of query block i0 against key block j0 (nc keys) with the causal offset off. */
static inline fa_band fa_causal_band(int kind, int causal, int64_t i0, int64_t j0, int64_t nc,
                                     int64_t off)
{
    const int64_t e = i0 + off - j0;
    fa_band bd = {causal && nc - 1 > e ? kind : FA_FULL, e};
    return bd;
}

/* 1 when rows [i, i + nr) x columns [j, j + nc) of C are all hidden. */
static inline int fa_band_hides(fa_band bd, int64_t i, int64_t nr, int64_t j, int64_t nc)
{
    if (bd.kind == FA_ROWS_UPTO_COL)
        return i > j + nc - 1 + bd.e;
    if (bd.kind == FA_ROWS_FROM_COL)
        return i + nr - 1 < j - bd.e;
    return 0;
}

/* The terms [*p0, *p1) of rows [i, i + nr) that some row of them sees (of kk). */
static inline void fa_band_terms(fa_band bd, int64_t i, int64_t nr, int64_t kk, int64_t *p0,
                                 int64_t *p1)
{
    int64_t lo = 0, hi = kk;
    if (bd.kind == FA_P_UPTO_ROW)
        hi = i + nr + bd.e;
    else if (bd.kind == FA_P_FROM_ROW)
        lo = i - bd.e;
    *p0 = lo < 0 ? 0 : (lo > kk ? kk : lo);
    *p1 = hi < *p0 ? *p0 : (hi > kk ? kk : hi);
}

#define FA_ROWS 8 /* rows of C a block of fa_gemm_body's products sums at a time */

/* a b + c rounded once, as the vector paths' contracted sums (a compiler that vectorizes a
 * scalar loop may otherwise split it into a product and a sum) */
#define FA_FMA(a, b, c) _Generic((a), float: fmaf, default: fma)(a, b, c)

/* One vector of each of FA_ROWS rows of fa_gemm_body's C: C (FA_ROWS x FA_W, ld ldc) = [C cs +]
 * the terms [p0, p1) of A (ai, ap as there) B (ld ldb). */
static inline void fa_gemm_rows(const real *restrict a, int64_t ai, int64_t ap,
                                const real *restrict B, int64_t ldb, real *restrict C,
                                int64_t ldc, int64_t p0, int64_t p1, int add,
                                const real *restrict cs)
{
    fa_vec x[FA_ROWS];
#pragma GCC unroll 8
    for (int r = 0; r < FA_ROWS; r++)
        x[r] = add ? (cs ? fa_load(C + r * ldc) * cs[r] : fa_load(C + r * ldc)) : (fa_vec){0};
    for (int64_t p = p0; p < p1; p++) {
        const fa_vec b0 = fa_load(B + p * ldb);
        const real *ar = a + p * ap;
#pragma GCC unroll 8
        for (int r = 0; r < FA_ROWS; r++)
            x[r] += ar[r * ai] * b0;
    }
#pragma GCC unroll 8
    for (int r = 0; r < FA_ROWS; r++)
        fa_store(C + r * ldc, x[r]);
}

/* What a product does with each element C[i][j] of its result before storing it (fa_epi):
 *   FA_EPI_NONE  nothing;
 *   FA_EPI_EXP2  C = 2^(C - row[i])             (the backward's P: scaled scores less lse);
 *   FA_EPI_DS    C = scale P[i][j] (C - row[i])  (dS from dP and D; P at ld FA_LD).
 * Each is the expression, in the order, of the separate pass over the tile it replaces, so
 * the results are the same bits. */
enum { FA_EPI_NONE, FA_EPI_EXP2, FA_EPI_DS };
typedef struct {
    int kind;
    const real *row, *p;
    real scale;
} fa_epi;

/* The epilogue of the vector of C at row i from column j (fa_epi_one: of one element). */
static inline fa_vec fa_epi_vec(fa_epi ep, fa_vec x, int64_t i, int64_t j)
{
    if (ep.kind == FA_EPI_EXP2)
        return fa_vexp2(x - ep.row[i]);
    if (ep.kind == FA_EPI_DS)
        return ep.scale * fa_load(ep.p + i * FA_LD + j) * (x - ep.row[i]);
    return x;
}

static inline real fa_epi_one(fa_epi ep, real x, int64_t i, int64_t j)
{
    if (ep.kind == FA_EPI_EXP2)
        return FA_EXP2(x - ep.row[i]);
    if (ep.kind == FA_EPI_DS)
        return ep.scale * ep.p[i * FA_LD + j] * (x - ep.row[i]);
    return x;
}

/* C (m x n, ld ldc) = [C cs +] A (m x k) B (k x n, ld ldb), small m, n; A's element (i, p) is
 * A[i * ai + p * ap] (so A may be a transposed tile).  Each element of C is one sequential sum
 * over p (starting from C when `add`, row i of C times cs[i] when cs is not NULL), whichever
 * path computes it; under a band (bd) blocks of C hidden entirely are skipped and the sums
 * leave out terms of hidden probabilities.  The epilogue ep (fa_epi) applies to each element
 * stored; it is used without a band only (the half blocks of a band store without it). */
static inline __attribute__((always_inline)) void
fa_gemm_body(int64_t m, int64_t n, int64_t kk, const real *restrict A, int64_t ai, int64_t ap,
             const real *restrict B, int64_t ldb, real *restrict C, int64_t ldc, int add,
             const real *restrict cs, fa_band bd, fa_epi ep)
{
    int64_t j = 0, p0, p1;
    for (; j + 2 * FA_W <= n; j += 2 * FA_W) {
        int64_t i = 0;
        for (; i + FA_ROWS <= m; i += FA_ROWS) {
            if (fa_band_hides(bd, i, FA_ROWS, j, 2 * FA_W))
                continue;
            fa_band_terms(bd, i, FA_ROWS, kk, &p0, &p1);
            /* under a band one half of the block may be hidden entirely: the other alone */
            const int64_t half = fa_band_hides(bd, i, FA_ROWS, j, FA_W) ? j + FA_W
                                 : fa_band_hides(bd, i, FA_ROWS, j + FA_W, FA_W) ? j : -1;
            if (half >= 0) {
                fa_gemm_rows(A + i * ai, ai, ap, B + half, ldb, C + i * ldc + half, ldc, p0, p1,
                             add, cs ? cs + i : NULL);
                continue;
            }
            fa_vec x[FA_ROWS][2];
            const real *a = A + i * ai;
#pragma GCC unroll 8
            for (int r = 0; r < FA_ROWS; r++) {
                x[r][0] = add ? fa_load(C + (i + r) * ldc + j) : (fa_vec){0};
                x[r][1] = add ? fa_load(C + (i + r) * ldc + j + FA_W) : (fa_vec){0};
                if (cs)
                    x[r][0] *= cs[i + r], x[r][1] *= cs[i + r];
            }
            for (int64_t p = p0; p < p1; p++) {
                const fa_vec b0 = fa_load(B + p * ldb + j), b1 = fa_load(B + p * ldb + j + FA_W);
                const real *ar = a + p * ap;
#pragma GCC unroll 8
                for (int r = 0; r < FA_ROWS; r++) {
                    const real av = ar[r * ai];
                    x[r][0] += av * b0, x[r][1] += av * b1;
                }
            }
#pragma GCC unroll 8
            for (int r = 0; r < FA_ROWS; r++) {
                fa_store(C + (i + r) * ldc + j, fa_epi_vec(ep, x[r][0], i + r, j));
                fa_store(C + (i + r) * ldc + j + FA_W, fa_epi_vec(ep, x[r][1], i + r, j + FA_W));
            }
        }
        for (; i < m; i++) {
            if (fa_band_hides(bd, i, 1, j, 2 * FA_W))
                continue;
            fa_band_terms(bd, i, 1, kk, &p0, &p1);
            real *c0 = C + i * ldc + j;
            fa_vec x0 = {0}, x1 = {0};
            if (add)
                x0 = fa_load(c0), x1 = fa_load(c0 + FA_W);
            if (cs)
                x0 *= cs[i], x1 *= cs[i];
            for (int64_t p = p0; p < p1; p++) {
                const real a0 = A[i * ai + p * ap];
                x0 += a0 * fa_load(B + p * ldb + j), x1 += a0 * fa_load(B + p * ldb + j + FA_W);
            }
            fa_store(c0, fa_epi_vec(ep, x0, i, j));
            fa_store(c0 + FA_W, fa_epi_vec(ep, x1, i, j + FA_W));
        }
    }
    for (; j + FA_W <= n; j += FA_W) {
        for (int64_t i = 0; i < m; i++) {
            if (fa_band_hides(bd, i, 1, j, FA_W))
                continue;
            fa_band_terms(bd, i, 1, kk, &p0, &p1);
            real *c0 = C + i * ldc + j;
            fa_vec x0 = {0};
            if (add)
                x0 = fa_load(c0);
            if (cs)
                x0 *= cs[i];
            for (int64_t p = p0; p < p1; p++)
                x0 += A[i * ai + p * ap] * fa_load(B + p * ldb + j);
            fa_store(c0, fa_epi_vec(ep, x0, i, j));
        }
    }
    for (; j < n; j++) {
        for (int64_t i = 0; i < m; i++) {
            if (fa_band_hides(bd, i, 1, j, 1))
                continue;
            fa_band_terms(bd, i, 1, kk, &p0, &p1);
            real x = add ? C[i * ldc + j] : 0;
            if (cs)
                x *= cs[i];
            for (int64_t p = p0; p < p1; p++)
                x = FA_FMA(A[i * ai + p * ap], B[p * ldb + j], x);
            C[i * ldc + j] = fa_epi_one(ep, x, i, j);
        }
    }
}

/* fa_gemm_body without a band (compiled without the band's tests) and with one. */
static const fa_band fa_no_band = {FA_FULL, 0};
static const fa_epi fa_no_epi = {FA_EPI_NONE, NULL, NULL, 0};

static void fa_gemm_full(int64_t m, int64_t n, int64_t kk, const real *restrict A, int64_t ai,
                         int64_t ap, const real *restrict B, int64_t ldb, real *restrict C,
                         int64_t ldc, int add, const real *restrict cs)
{
    fa_gemm_body(m, n, kk, A, ai, ap, B, ldb, C, ldc, add, cs, fa_no_band, fa_no_epi);
}

static void fa_gemm_banded(int64_t m, int64_t n, int64_t kk, const real *restrict A,
                           int64_t ai, int64_t ap, const real *restrict B, int64_t ldb,
                           real *restrict C, int64_t ldc, int add, const real *restrict cs,
                           fa_band bd)
{
    fa_gemm_body(m, n, kk, A, ai, ap, B, ldb, C, ldc, add, cs, bd, fa_no_epi);
}

/* C (m x n, ld ldc) = 2^(A B - row[i]) and C = scale P (A B - row[i]): fa_gemm_full with the
 * epilogues FA_EPI_EXP2 and FA_EPI_DS (P: m x n, ld FA_LD). */
static void fa_gemm_exp2(int64_t m, int64_t n, int64_t kk, const real *restrict A, int64_t ai,
                         int64_t ap, const real *restrict B, int64_t ldb, real *restrict C,
                         int64_t ldc, const real *row)
{
    const fa_epi ep = {FA_EPI_EXP2, row, NULL, 0};
    fa_gemm_body(m, n, kk, A, ai, ap, B, ldb, C, ldc, 0, NULL, fa_no_band, ep);
}

static void fa_gemm_ds(int64_t m, int64_t n, int64_t kk, const real *restrict A, int64_t ai,
                       int64_t ap, const real *restrict B, int64_t ldb, real *restrict C,
                       int64_t ldc, const real *row, const real *P, real scale)
{
    const fa_epi ep = {FA_EPI_DS, row, P, scale};
    fa_gemm_body(m, n, kk, A, ai, ap, B, ldb, C, ldc, 0, NULL, fa_no_band, ep);
}

static inline void fa_gemm(int64_t m, int64_t n, int64_t kk, const real *restrict A, int64_t ai,
                           int64_t ap, const real *restrict B, int64_t ldb, real *restrict C,
                           int64_t ldc, int add, const real *restrict cs, fa_band bd)
{
    if (bd.kind == FA_FULL)
        fa_gemm_full(m, n, kk, A, ai, ap, B, ldb, C, ldc, add, cs);
    else
        fa_gemm_banded(m, n, kk, A, ai, ap, B, ldb, C, ldc, add, cs, bd);
}

#if FA_FLOAT && defined(__AVX512F__)
/* r[k] = column k of the 16 x 16 block whose rows are r[0..16) (in-register shuffles). */
static inline void fa_transpose16(__m512 r[16])
{
    __m512 t[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 4; i++) {
        const __m512d a = _mm512_castps_pd(t[4 * i]), b = _mm512_castps_pd(t[4 * i + 1]);
        const __m512d c = _mm512_castps_pd(t[4 * i + 2]), d = _mm512_castps_pd(t[4 * i + 3]);
        r[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
        r[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
        r[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
        r[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
    }
    for (int i = 0; i < 4; i++) {
        t[i] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0x88);
        t[i + 4] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0xdd);
        t[i + 8] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0x88);
        t[i + 12] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0xdd);
    }
    for (int i = 0; i < 8; i++) {
        r[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
        r[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xdd);
    }
}
#endif

/* dst (w x n, ld FA_LD) = scale * src (n rows x w, ld lds) transposed.  With AVX-512 and
 * float, whole 16 x 16 blocks go through registers (16 row loads, fa_transpose16, 16 row
 * stores); the rest FA_W rows of src at a time, so each row of dst is written a vector at a
 * time while those rows stay in L1. */
static void fa_transpose(const real *restrict src, int64_t lds, int64_t n, int64_t w,
                         real scale, real *restrict dst)
{
    int64_t c0 = 0, wb = 0;
#if FA_FLOAT && defined(__AVX512F__)
    wb = w - w % 16;
    for (; c0 + 16 <= n; c0 += 16)
        for (int64_t d0 = 0; d0 < wb; d0 += 16) {
            __m512 r[16];
            for (int i = 0; i < 16; i++)
                r[i] = _mm512_mul_ps(_mm512_loadu_ps(src + (c0 + i) * lds + d0),
                                     _mm512_set1_ps(scale));
            fa_transpose16(r);
            for (int i = 0; i < 16; i++)
                _mm512_storeu_ps(dst + (d0 + i) * FA_LD + c0, r[i]);
        }
#endif
    /* columns past the whole blocks of the rows done above, then the rows left */
    for (int64_t c1 = 0; c1 < c0; c1 += FA_W)
        for (int64_t d = wb; d < w; d++)
#pragma omp simd
            for (int64_t c = 0; c < FA_W; c++)
                dst[d * FA_LD + c1 + c] = scale * src[(c1 + c) * lds + d];
    for (; c0 < n; c0 += FA_W) {
        const int64_t cn = n - c0 < FA_W ? n - c0 : FA_W;
        for (int64_t d = 0; d < w; d++)
#pragma omp simd
            for (int64_t c = 0; c < cn; c++)
                dst[d * FA_LD + c0 + c] = scale * src[(c0 + c) * lds + d];
    }
}

/* dst (n x w, contiguous) = src (n rows x w, ld lds), a vector at a time (a loop of memcpy
 * calls costs more than the copy for rows this short): a slice of strided rows (token-major
 * operands are rows of a wider projection) packed for the tile products. */
static void fa_pack(const real *restrict src, int64_t lds, int64_t n, int64_t w,
                    real *restrict dst)
{
    for (int64_t c = 0; c < n; c++) {
        const real *from = src + c * lds;
        real *to = dst + c * w;
        int64_t d = 0;
        for (; d + FA_W <= w; d += FA_W)
            fa_store(to + d, fa_load(from + d));
        for (; d < w; d++)
            to[d] = from[d];
    }
}

/* Rows r0 .. r0 + n of width w at row stride ld set to 0, a vector at a time. */
static void fa_zero_rows(real *x, int64_t n, int64_t w, int64_t ld)
{
    for (int64_t r = 0; r < n; r++) {
        int64_t d = 0;
        for (; d + FA_W <= w; d += FA_W)
            fa_store(x + r * ld + d, (fa_vec){0});
        for (; d < w; d++)
            x[r * ld + d] = 0;
    }
}

#endif
