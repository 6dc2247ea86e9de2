/* Row softmax and fused softmax-cross-entropy (see softmax.h).  One exp per element, in the
 * vectorizable NL_EXP. */
#include "no_fp_traps.h"
#include "common.h"
#include "softmax.h"
#include "bf16_rows.h"

/* Lanes of exp_row's sum: element k is added into lane k % EXP_LANES, in order, and the
 * lanes then in lane order (a vector register of doubles, the additions' order written out,
 * so it does not depend on what the compiler does with the loop). */
#define EXP_LANES 8

/* e = exp(x - max(x)) for one row of K; returns the sum of e (in double, by EXP_LANES lanes)
 * and sets *top. */
static double exp_row(const real *x, real *e, int64_t K, real *top)
{
    real m = x[0];
    /* from k = 0 (x[0] again): whole, aligned vector loads, which a row just widened into x
     * forwards from its stores (loads from x + 1 would straddle two of them and stall) */
#pragma omp simd reduction(max : m)
    for (int64_t k = 0; k < K; k++)
        m = x[k] > m ? x[k] : m;
#pragma omp simd
    for (int64_t k = 0; k < K; k++)
        e[k] = NL_EXP(x[k] - m);
    double lane[EXP_LANES] = {0};
    int64_t k = 0;
    for (; k + EXP_LANES <= K; k += EXP_LANES)
        for (int j = 0; j < EXP_LANES; j++)
            lane[j] += e[k + j];
    double sum = 0;
    for (int j = 0; j < EXP_LANES; j++)
        sum += lane[j];
    for (; k < K; k++)
        sum += e[k];
    *top = m;
    return sum;
}

void softmax_rows(const real *x, real *out, int64_t M, int64_t K)
{
#pragma omp parallel for schedule(dynamic, nl_grain(K)) if (M * K >= NL_PARALLEL_MIN)
    for (int64_t m = 0; m < M; m++) {
        real top;
        real *o = out + m * K;
        const real inv = (real)(1.0 / exp_row(x + m * K, o, K, &top));
        for (int64_t k = 0; k < K; k++)
            o[k] *= inv;
    }
}

double softmax_cross_entropy(const real *logits, const real *targets, real *probs, real *grad,
                             int64_t M, int64_t K, double scale)
{
    double loss = 0;
    const real s = (real)scale;
#pragma omp parallel for schedule(static) reduction(+ : loss) if (M * K >= NL_PARALLEL_MIN)
    for (int64_t m = 0; m < M; m++) {
        const real *xr = logits + m * K, *t = targets + m * K;
        real *p = probs + m * K, *g = grad + m * K;
        real top;
        const double sum = exp_row(xr, p, K, &top);
        const real logsum = (real)log(sum), inv = (real)(1.0 / sum);
        double row = 0;
        for (int64_t k = 0; k < K; k++) {
            row += (double)t[k] * (double)((xr[k] - top) - logsum);
            p[k] *= inv;
            g[k] = s * (p[k] - t[k]);
        }
        loss -= row;
    }
    return loss;
}

double softmax_cross_entropy_index(const real *logits, const int32_t *idx, real *probs,
                                   real *grad, int64_t M, int64_t K, double scale,
                                   int64_t *bad)
{
    *bad = -1;
    for (int64_t m = 0; m < M; m++)
        if (idx[m] < 0 || idx[m] >= K) {
            *bad = m;
            return NAN;
        }
    double loss = 0;
    const real s = (real)scale;
#pragma omp parallel for schedule(static) reduction(+ : loss) if (M * K >= NL_PARALLEL_MIN)
    for (int64_t m = 0; m < M; m++) {
        const real *xr = logits + m * K;
        real *p = probs + m * K, *g = grad + m * K;
        real top;
        const double sum = exp_row(xr, p, K, &top);
        const real logsum = (real)log(sum), inv = (real)(1.0 / sum);
        const int64_t c = idx[m];
        for (int64_t k = 0; k < K; k++) {
            p[k] *= inv;
            g[k] = s * p[k];
        }
        g[c] = s * (p[c] - (real)1);
        loss -= (double)((xr[c] - top) - logsum);
    }
    return loss;
}

/* ---- bfloat16 rows (softmax.h: softmax_rows_bf16, softmax_cross_entropy*_bf16) ---- */

/* A row of K bf16 logits, staged: a row of at most BF16_ROW_STAGED columns is widened whole
 * into `row` and its exps kept in `e`; a longer one is widened a chunk at a time and its exps
 * computed again when asked for (the same values: NL_EXP of the same arguments). */
struct bf16_softmax_row {
    const uint16_t *x;
    int64_t K;
    int whole;
    real top;
    /* buf between row and e: 2048 floats apart, e[k] and row[k] would share their address
     * bits below 4 KiB, and the stores to e stall the loads from row (4K aliasing) */
    real row[BF16_ROW_STAGED] BF16_ALIGNED, buf[BF16_ROW_CHUNK] BF16_ALIGNED,
        e[BF16_ROW_STAGED] BF16_ALIGNED;
};

/* r set to the row x of K logits (its buffers left as they are). */
static inline void bf16_softmax_row_at(struct bf16_softmax_row *r, const uint16_t *x,
                                       int64_t K)
{
    r->x = x;
    r->K = K;
    r->whole = K <= BF16_ROW_STAGED;
}

/* The row's max and its sum of exp(x - max) in double, added in column order (exp_row's). */
static double bf16_row_exp_sum(struct bf16_softmax_row *r)
{
    const int64_t K = r->K;
    if (r->whole) {
        bf16_widen(r->x, r->row, K);
        return exp_row(r->row, r->e, K, &r->top);
    }
    real m = bf16_to_f32(r->x[0]);
    for (int64_t k = 1; k < K; k++) {
        const real v = bf16_to_f32(r->x[k]);
        m = v > m ? v : m;
    }
    double lane[EXP_LANES] = {0}, sum = 0;
    const int64_t whole = K - K % EXP_LANES;
    for (int64_t d0 = 0; d0 < K; d0 += BF16_ROW_CHUNK) {
        const int64_t n = bf16_chunk(K, d0);
        bf16_widen(r->x + d0, r->buf, n);
        for (int64_t k = 0; k < n; k++)
            r->buf[k] = NL_EXP(r->buf[k] - m);
        const int64_t lanes = d0 + n <= whole ? n : whole - d0;
        for (int64_t k = 0; k < lanes; k += EXP_LANES)
            for (int j = 0; j < EXP_LANES; j++)
                lane[j] += r->buf[k + j];
    }
    for (int j = 0; j < EXP_LANES; j++)
        sum += lane[j];
    for (int64_t k = whole; k < K; k++)
        sum += NL_EXP((real)bf16_to_f32(r->x[k]) - m);
    r->top = m;
    return sum;
}

/* Chunk [d0, d0 + n) of the row: its logits (*xs) and exps (returned). */
static const real *bf16_row_chunk(struct bf16_softmax_row *r, int64_t d0, int64_t n,
                                  const real **xs)
{
    if (r->whole) {
        *xs = r->row + d0;
        return r->e + d0;
    }
    bf16_widen(r->x + d0, r->buf, n);
    *xs = r->buf;
    for (int64_t k = 0; k < n; k++)
        r->e[k] = NL_EXP(r->buf[k] - r->top);
    return r->e;
}

void softmax_rows_bf16(const uint16_t *x, uint16_t *out, int64_t M, int64_t K)
{
#pragma omp parallel for schedule(dynamic, nl_grain(K)) if (M * K >= NL_PARALLEL_MIN)
    for (int64_t m = 0; m < M; m++) {
        struct bf16_softmax_row r;  /* its buffers not cleared: written before they are read */
        bf16_softmax_row_at(&r, x + m * K, K);
        const real inv = (real)(1.0 / bf16_row_exp_sum(&r));
        uint16_t *o = out + m * K;
        for (int64_t d0 = 0; d0 < K; d0 += BF16_ROW_CHUNK) {
            const int64_t n = bf16_chunk(K, d0);
            const real *xs, *e = bf16_row_chunk(&r, d0, n, &xs);
#pragma omp simd
            for (int64_t k = 0; k < n; k++)
                o[d0 + k] = f32_to_bf16((float)(e[k] * inv));
        }
    }
}

/* One row of the fused softmax-cross-entropy on bf16 bits: probs and grad written, the row's
 * loss returned; targets (K bf16, one-hot or soft) or, where NULL, the class index c. */
static double sce_row_bf16(const uint16_t *logits, const uint16_t *targets, int64_t c,
                           uint16_t *p, uint16_t *g, int64_t K, real s)
{
    struct bf16_softmax_row r;  /* its buffers not cleared: written before they are read */
    bf16_softmax_row_at(&r, logits, K);
    const double sum = bf16_row_exp_sum(&r);
    const real logsum = (real)log(sum), inv = (real)(1.0 / sum);
    double row = 0;
    for (int64_t d0 = 0; d0 < K; d0 += BF16_ROW_CHUNK) {
        const int64_t n = bf16_chunk(K, d0);
        const real *xs, *e = bf16_row_chunk(&r, d0, n, &xs);
        if (targets) {
            const uint16_t *t = targets + d0;
#pragma omp simd
            for (int64_t k = 0; k < n; k++) {
                const real tk = bf16_to_f32(t[k]), pk = e[k] * inv;
                p[d0 + k] = f32_to_bf16((float)pk);
                g[d0 + k] = f32_to_bf16((float)(s * (pk - tk)));
            }
            for (int64_t k = 0; k < n; k++)  /* in column order, as the float function */
                row += (double)bf16_to_f32(t[k]) * (double)((xs[k] - r.top) - logsum);
            continue;
        }
#pragma omp simd
        for (int64_t k = 0; k < n; k++) {
            const real pk = e[k] * inv;
            p[d0 + k] = f32_to_bf16((float)pk);
            g[d0 + k] = f32_to_bf16((float)(s * pk));
        }
        if (c >= d0 && c < d0 + n) {
            g[c] = f32_to_bf16((float)(s * (e[c - d0] * inv - (real)1)));
            row = (double)((xs[c - d0] - r.top) - logsum);
        }
    }
    return -row;
}

/* The rows of either bf16 cross-entropy; the loss summed in nl_blocks(M) fixed row blocks,
 * in order (the same on any number of threads). */
static double sce_rows_bf16(const uint16_t *logits, const uint16_t *targets, const int32_t *idx,
                            uint16_t *probs, uint16_t *grad, int64_t M, int64_t K, double scale)
{
    const int64_t nb = nl_blocks(M);
    double part[NL_BLOCKS];
#pragma omp parallel for schedule(dynamic, 1) if (M * K >= NL_PARALLEL_MIN)
    for (int64_t blk = 0; blk < nb; blk++) {
        int64_t lo, hi;
        nl_split(M, blk, nb, &lo, &hi);
        double acc = 0;
        for (int64_t m = lo; m < hi; m++)
            acc += sce_row_bf16(logits + m * K, targets ? targets + m * K : NULL,
                                idx ? idx[m] : 0, probs + m * K, grad + m * K, K,
                                (real)scale);
        part[blk] = acc;
    }
    double loss = 0;
    for (int64_t blk = 0; blk < nb; blk++)
        loss += part[blk];
    return loss;
}

double softmax_cross_entropy_bf16(const uint16_t *logits, const uint16_t *targets,
                                  uint16_t *probs, uint16_t *grad, int64_t M, int64_t K,
                                  double scale)
{
    return sce_rows_bf16(logits, targets, NULL, probs, grad, M, K, scale);
}

double softmax_cross_entropy_index_bf16(const uint16_t *logits, const int32_t *idx,
                                        uint16_t *probs, uint16_t *grad, int64_t M, int64_t K,
                                        double scale, int64_t *bad)
{
    *bad = -1;
    for (int64_t m = 0; m < M; m++)
        if (idx[m] < 0 || idx[m] >= K) {
            *bad = m;
            return NAN;
        }
    return sce_rows_bf16(logits, NULL, idx, probs, grad, M, K, scale);
}
