/* Per-column sums over the rows of (M, C) arrays (an NHWC batch viewed as (N*H*W, C), or
 * the rows of a layer's activations), vectorised along the rows' contiguous memory: batch
 * norm's statistics and the backward sums of batch and layer norm.  Included by norm.c;
 * not a cffi header.
 *
 * Lanes.  An (M, C) array is read as a flat run of M*C elements cut into periods of P lanes,
 * P a whole number of rows (cs_period): lane j of every period holds channel j % C.  With
 * P = lcm(C, VL) (VL: `real`s per vector register) every vector load is whole, whatever C is
 * (3, 17, 100, ...); a per-channel operand is repeated along the period once per call
 * (cs_lanes: at most CS_PERIOD_MAX lanes).  Where lcm(C, VL) would be longer, P = C: one row
 * a period, its last C % VL lanes done one by one.
 *
 * Sums.  The rows are cut into cs_blocks(M, C) fixed blocks (nl_split), each summed into its
 * own slot, and the slots added in block order, so a sum has the same bits on any number of
 * threads.  A block is read a super-period (cs_super_period: a period, repeated until it holds
 * at least CS_SLAB vectors) at a time, CS_SLAB vectors of lanes at a time (a slab), each lane
 * summed down the block in registers; a slab's lanes are then folded into the block's
 * per-channel sums in lane order. */
#ifndef NEONLITE_COLUMN_SUMS_H
#define NEONLITE_COLUMN_SUMS_H

#include "common.h"

/* A vector register of the target (AVX-512: 64 bytes, 32 registers; else AVX2's 32 bytes and
 * 16 registers) and the vectors of lanes summed at once, so that their accumulators, in
 * double (two registers a float vector), stay in registers. */
#ifdef __AVX512F__
#define CS_VBYTES 64
#define CS_SLAB 4
#else
#define CS_VBYTES 32
#define CS_SLAB 2
#endif
#define CS_VL ((int64_t)(CS_VBYTES / sizeof(real)))
#define CS_PERIOD_MAX (32 * CS_VL)
/* Backward sums: float lanes over CS_RUN super-periods, then added into double lanes. */
#define CS_RUN 32

/* Row blocks hold at least this many elements where the rows allow (cs_blocks). */
#define CS_BLOCK_MIN 4096

typedef real cs_uvec __attribute__((vector_size(CS_VBYTES), aligned(sizeof(real))));
typedef double cs_dvec __attribute__((vector_size(CS_VBYTES / sizeof(real) * sizeof(double))));
typedef __typeof__((cs_uvec){0} > (cs_uvec){0}) cs_mask;

static inline int64_t cs_gcd(int64_t a, int64_t b)
{
    while (b) {
        const int64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* The row blocks of a sum over (M, C): nl_blocks(M) (at most 32), fewer where a block would
 * hold under CS_BLOCK_MIN elements, whose fixed costs (folding a block's lanes, adding its
 * sums) would outweigh its rows.  A function of the shape alone. */
static inline int64_t cs_blocks(int64_t M, int64_t C)
{
    const int64_t most = nl_blocks(M), by_size = M * C / CS_BLOCK_MIN;
    return by_size < 1 ? 1 : (by_size < most ? by_size : most);
}

/* Lanes of a period of C channels (see the top of this file). */
static inline int64_t cs_period(int64_t C)
{
    const int64_t l = C / cs_gcd(C, CS_VL) * CS_VL;
    return l <= CS_PERIOD_MAX ? l : C;
}

/* Lanes the sums read at a time: whole periods, at least CS_SLAB vectors when a period is
 * shorter. */
static inline int64_t cs_super_period(int64_t C)
{
    const int64_t p = cs_period(C), want = CS_SLAB * CS_VL;
    return p >= want ? p : p * ((want + p - 1) / p);
}

/* Per-channel operand v (C,) along `lanes` lanes: lane j = v[j % C].  Returns v itself when
 * lanes == C, else `buf` (lanes reals) filled. */
static inline const real *cs_lanes(const real *v, int64_t C, int64_t lanes, real *buf)
{
    if (lanes == C)
        return v;
    for (int64_t j = 0; j < lanes; j += C)
        memcpy(buf + j, v, (size_t)(lanes - j < C ? lanes - j : C) * sizeof(real));
    return buf;
}

static inline cs_dvec cs_widen(const real *p)
{
    return __builtin_convertvector(*(const cs_uvec *)p, cs_dvec);
}

/* Forward moments of one slab, NV vectors of lanes (x and shift at the slab's first lane),
 * over n super-periods `stride` elements apart: o1[l] = sum (x - shift), o2[l] =
 * sum (x - shift)^2, in double (lanes l < NV * VL). */
static inline __attribute__((always_inline)) void cs_moments_slab(
    const real *x, int64_t n, int64_t stride, const real *shift, double *o1, double *o2,
    const int NV)
{
    cs_dvec a1[CS_SLAB], a2[CS_SLAB], sh[CS_SLAB];
    for (int v = 0; v < NV; v++) {
        a1[v] = a2[v] = (cs_dvec){0};
        sh[v] = cs_widen(shift + v * CS_VL);
    }
    for (int64_t i = 0; i < n; i++) {
        const real *p = x + i * stride;
        for (int v = 0; v < NV; v++) {
            const cs_dvec t = cs_widen(p + v * CS_VL) - sh[v];
            a1[v] += t;
            a2[v] += t * t;
        }
    }
    memcpy(o1, a1, (size_t)NV * sizeof(cs_dvec));
    memcpy(o2, a2, (size_t)NV * sizeof(cs_dvec));
}

/* Backward sums of one slab (as cs_moments_slab): o1[l] = sum g, o2[l] = sum g * b with
 * g = a, or with a mask k, g = a where k > 0 and 0 elsewhere; float lanes over CS_RUN
 * super-periods at a time, then double. */
static inline __attribute__((always_inline)) void cs_dots_slab(
    const real *a, const real *b, const real *k, int64_t n, int64_t stride, double *o1,
    double *o2, const int NV)
{
    cs_dvec d1[CS_SLAB], d2[CS_SLAB];
    for (int v = 0; v < NV; v++)
        d1[v] = d2[v] = (cs_dvec){0};
    for (int64_t i0 = 0; i0 < n; i0 += CS_RUN) {
        const int64_t i1 = i0 + CS_RUN < n ? i0 + CS_RUN : n;
        cs_uvec r1[CS_SLAB], r2[CS_SLAB];
        for (int v = 0; v < NV; v++)
            r1[v] = r2[v] = (cs_uvec){0};
        for (int64_t i = i0; i < i1; i++) {
            const int64_t o = i * stride;
            for (int v = 0; v < NV; v++) {
                cs_uvec g = *(const cs_uvec *)(a + o + v * CS_VL);
                if (k != NULL)
                    g = (cs_uvec)((cs_mask)g & (*(const cs_uvec *)(k + o + v * CS_VL) > 0));
                r1[v] += g;
                r2[v] += g * *(const cs_uvec *)(b + o + v * CS_VL);
            }
        }
        for (int v = 0; v < NV; v++) {
            d1[v] += __builtin_convertvector(r1[v], cs_dvec);
            d2[v] += __builtin_convertvector(r2[v], cs_dvec);
        }
    }
    memcpy(o1, d1, (size_t)NV * sizeof(cs_dvec));
    memcpy(o2, d2, (size_t)NV * sizeof(cs_dvec));
}

enum { SHIFTED_SQUARES, SUM_AND_DOT };

/* One slab of either kind, its vector count a constant (1 to CS_SLAB) in each case. */
static void cs_slab(int kind, const real *a, const real *b, const real *k, int64_t n,
                    int64_t stride, double *o1, double *o2, int nv)
{
#define CS_SLAB_CASE(NV)                                                                      \
    case NV:                                                                                  \
        if (kind == SHIFTED_SQUARES)                                                               \
            cs_moments_slab(a, n, stride, b, o1, o2, NV);                                     \
        else                                                                                  \
            cs_dots_slab(a, b, k, n, stride, o1, o2, NV);                                     \
        return;
    switch (nv) {
        CS_SLAB_CASE(1)
        CS_SLAB_CASE(2)
#if CS_SLAB > 2
        CS_SLAB_CASE(3)
        CS_SLAB_CASE(4)
#endif
    }
#undef CS_SLAB_CASE
}

/* One element's terms, in double: (x - shift, its square) or (g, g * b). */
static inline void cs_terms(int kind, real a, real b, const real *k, double *t1, double *t2)
{
    if (kind == SHIFTED_SQUARES) {
        const double t = (double)a - (double)b;
        *t1 = t;
        *t2 = t * t;
        return;
    }
    const double g = k != NULL && !(*k > 0) ? 0.0 : (double)a;
    *t1 = g;
    *t2 = g * (double)b;
}

/* s1, s2 (C,) = the sums of one block of rows (rows, C) starting at a (b, k: the same rows
 * of the other operands, k NULL or a mask; for SHIFTED_SQUARES, b is the shift along
 * cs_super_period(C) lanes): see column_sums.  Slabs, then the lanes left after the whole
 * vectors, then the rows after the whole super-periods, each in a fixed order. */
static void cs_block_sums(int kind, const real *a, const real *b, const real *k, int64_t rows,
                          int64_t C, double *s1, double *s2)
{
    const int64_t P = cs_super_period(C), n = rows * C / P, whole = P - P % CS_VL;
    const int moments = kind == SHIFTED_SQUARES;
    double o1[CS_SLAB * CS_VL], o2[CS_SLAB * CS_VL];
    for (int64_t c = 0; c < C; c++)
        s1[c] = s2[c] = 0;
    for (int64_t s0 = 0; s0 < whole; s0 += CS_SLAB * CS_VL) {
        const int64_t width = whole - s0 < CS_SLAB * CS_VL ? whole - s0 : CS_SLAB * CS_VL;
        cs_slab(kind, a + s0, b + s0, k ? k + s0 : NULL, n, P, o1, o2,
                (int)(width / CS_VL));
        for (int64_t l = 0, c = s0 % C; l < width; l++, c = c + 1 == C ? 0 : c + 1) {
            s1[c] += o1[l];
            s2[c] += o2[l];
        }
    }
    for (int64_t l = whole, c = whole % C; l < P; l++, c = c + 1 == C ? 0 : c + 1) {
        double t1, t2, u1 = 0, u2 = 0;
        for (int64_t i = 0; i < n; i++) {
            const int64_t e = i * P + l;
            cs_terms(kind, a[e], moments ? b[l] : b[e], k ? k + e : NULL, &t1, &t2);
            u1 += t1;
            u2 += t2;
        }
        s1[c] += u1;
        s2[c] += u2;
    }
    for (int64_t e = n * P, c = 0; e < rows * C; e++, c = c + 1 == C ? 0 : c + 1) {
        double t1, t2;
        cs_terms(kind, a[e], moments ? b[c] : b[e], k ? k + e : NULL, &t1, &t2);
        s1[c] += t1;
        s2[c] += t2;
    }
}

/* Column sums over the rows of (M, C) arrays a, b in fixed blocks (see the top of this file):
 *   SHIFTED_SQUARES: out1[c] = sum_m (a - a[0, c]),  out2[c] = sum_m (a - a[0, c])^2, in
 *                    double throughout (b unused), so batch norm over the whole batch and
 *                    over the shards of data-parallel ranks (batchnorm_moments) agree to
 *                    double rounding, whatever the blocks;
 *   SUM_AND_DOT:     out1[c] = sum_m g,  out2[c] = sum_m g * b, g = a, or with a mask (M, C)
 *                    (or NULL) a only where the mask is > 0; float lanes over CS_RUN
 *                    super-periods, then double.
 * No rows: zeros.  `blocks`: 2 C nl_blocks(M) doubles of scratch (at least 2 C
 * cs_blocks(M, C)). */
static void column_sums(int mode, const real *a, const real *b, const real *mask, int64_t M,
                        int64_t C, double *out1, double *out2, double *blocks)
{
    if (M < 1 || C < 1) {
        for (int64_t c = 0; c < C; c++)
            out1[c] = out2[c] = 0;
        return;
    }
    const int64_t nb = cs_blocks(M, C);
    real shift[CS_PERIOD_MAX];
    const real *lanes = mode == SHIFTED_SQUARES ? cs_lanes(a, C, cs_super_period(C), shift) : b;
#pragma omp parallel for schedule(dynamic, 1) if (M * C >= NL_PARALLEL_MIN)
    for (int64_t blk = 0; blk < nb; blk++) {
        int64_t lo, hi;
        nl_split(M, blk, nb, &lo, &hi);
        const int64_t o = lo * C;
        cs_block_sums(mode, a + o, mode == SHIFTED_SQUARES ? lanes : b + o,
                      mask ? mask + o : NULL, hi - lo, C, blocks + blk * 2 * C,
                      blocks + blk * 2 * C + C);
    }
    for (int64_t c = 0; c < C; c++) {
        double a1 = 0, a2 = 0;
        for (int64_t blk = 0; blk < nb; blk++) {
            a1 += blocks[blk * 2 * C + c];
            a2 += blocks[blk * 2 * C + C + c];
        }
        out1[c] = a1;
        out2[c] = a2;
    }
}

#endif
