/* Batch norm and layer norm, forward and backward (see norm.h). */
#include "common.h"
#include "norm.h"
#include "batchnorm_nhwc.h"
#include "bf16_rows.h"

/* The parts of a kernel's `work` (norm_work_size(M, C) doubles, see norm.h): 2 C double
 * sums, then 3 C `real` per-channel factors (rounded up to whole doubles), then the block sums
 * of column_sums (column_sums.h): 2 C doubles for each of nl_blocks(M) row blocks. */
static int64_t factors_size(int64_t C)
{
    const int64_t d = (int64_t)sizeof(double);
    return (3 * C * (int64_t)sizeof(real) + d - 1) / d;
}

static real *work_factors(double *work, int64_t C)
{
    return (real *)(work + 2 * C);
}

static double *work_blocks(double *work, int64_t C)
{
    return work + 2 * C + factors_size(C);
}

/* After the block sums: a `real` run sum of 2 C columns for each row block (layer norm's bf16
 * backward sums a run of rows in float before adding it to its block's double sums). */
static real *work_runs(double *work, int64_t M, int64_t C)
{
    return (real *)(work_blocks(work, C) + nl_blocks(M) * 2 * C);
}

#include "batchnorm_bf16.h"

int64_t norm_work_size(int64_t M, int64_t C)
{
    const int64_t d = (int64_t)sizeof(double);
    const int64_t runs = (nl_blocks(M) * 2 * C * (int64_t)sizeof(real) + d - 1) / d;
    return 2 * C + factors_size(C) + nl_blocks(M) * 2 * C + runs;
}

void batchnorm_fprop_train(const real *x, const real *gamma, const real *beta, real *y,
                           real *xhat, real *mean, real *invstd, real *running_mean,
                           real *running_var, double *work, int64_t M, int64_t C, double eps,
                           double momentum, int relu)
{
    double *s1 = work, *s2 = work + C;
    /* Sums shifted by the first row keep the one-pass variance accurate. */
    column_sums(SHIFTED_SQUARES, x, NULL, NULL, M, C, s1, s2, work_blocks(work, C));
    for (int64_t c = 0; c < C; c++) {
        const double shift = s1[c] / (double)M;
        double var = s2[c] / (double)M - shift * shift;
        if (var < 0)
            var = 0;
        const double mu = (M > 0 ? (double)x[c] : 0.0) + shift;
        mean[c] = (real)mu;
        invstd[c] = (real)(1.0 / sqrt(var + eps));
        running_mean[c] = (real)(momentum * running_mean[c] + (1.0 - momentum) * mu);
        running_var[c] = (real)(momentum * running_var[c] + (1.0 - momentum) * var *
                                ((double)M / (double)(M > 1 ? M - 1 : 1)));
    }
    bn_normalize(x, gamma, beta, y, xhat, mean, invstd, M, C, relu);
}

void batchnorm_moments(const real *x, int64_t M, int64_t C, double *mean, double *m2,
                       double *work)
{
    column_sums(SHIFTED_SQUARES, x, NULL, NULL, M, C, mean, m2, work_blocks(work, C));
    for (int64_t c = 0; c < C; c++) {
        const double s1 = mean[c];
        mean[c] = (M > 0 ? (double)x[c] : 0.0) + s1 / (double)M;
        m2[c] = m2[c] - s1 * (s1 / (double)M);
        if (m2[c] < 0)
            m2[c] = 0;
    }
}

void batchnorm_apply(const real *x, const real *gamma, const real *beta, real *y, real *xhat,
                     const real *mean, const real *invstd, int64_t M, int64_t C, int relu)
{
    bn_normalize(x, gamma, beta, y, xhat, mean, invstd, M, C, relu);
}

void batchnorm_fprop_infer(const real *x, const real *gamma, const real *beta, real *y,
                           real *xhat, real *mean, real *invstd, const real *running_mean,
                           const real *running_var, int64_t M, int64_t C, double eps,
                           int relu)
{
    for (int64_t c = 0; c < C; c++) {
        mean[c] = running_mean[c];
        invstd[c] = (real)(1.0 / sqrt((double)running_var[c] + eps));
    }
    bn_normalize(x, gamma, beta, y, xhat, mean, invstd, M, C, relu);
}

void batchnorm_bprop(const real *dy, const real *xhat, const real *invstd, const real *gamma,
                     real *dx, real *dgamma, real *dbeta, double *work, int64_t M, int64_t C,
                     double beta_acc, const real *relu_y)
{
    double *db = work, *dg = work + C;
    real *k = work_factors(work, C);
    real *rdb = k + C, *rdg = k + 2 * C;
    column_sums(SUM_AND_DOT, dy, xhat, relu_y, M, C, db, dg, work_blocks(work, C));
    for (int64_t c = 0; c < C; c++) {
        dgamma[c] += (real)dg[c];
        dbeta[c] += (real)db[c];
        k[c] = (real)((double)gamma[c] * (double)invstd[c] / (double)M);
        rdb[c] = (real)db[c];
        rdg[c] = (real)dg[c];
    }
    bn_input_grad(dy, xhat, relu_y, k, rdb, rdg, dx, M, C, (real)beta_acc);
}

void layernorm_fprop(const real *x, const real *gamma, const real *beta, real *y, real *xhat,
                     real *invstd, const real *residual, real *total, int64_t M, int64_t D,
                     double eps)
{
#pragma omp parallel for schedule(dynamic, nl_grain(D)) if (M * D >= NL_PARALLEL_MIN)
    for (int64_t m = 0; m < M; m++) {
        const real *xr = x + m * D;
        real *yr = y + m * D, *hr = xhat ? xhat + m * D : NULL;
        if (residual) {
            const real *rr = residual + m * D;
            real *tr = total + m * D;
            for (int64_t d = 0; d < D; d++)
                tr[d] = xr[d] + rr[d];
            xr = tr;
        }
        double sum = 0;
#pragma omp simd reduction(+ : sum)
        for (int64_t d = 0; d < D; d++)
            sum += xr[d];
        const double mu = sum / (double)D;
        double sq = 0;
#pragma omp simd reduction(+ : sq)
        for (int64_t d = 0; d < D; d++) {
            const double t = (double)xr[d] - mu;
            sq += t * t;
        }
        const real inv = (real)(1.0 / sqrt(sq / (double)D + eps));
        const real mean = (real)mu;
        invstd[m] = inv;
        if (!hr) {
            for (int64_t d = 0; d < D; d++)
                yr[d] = (xr[d] - mean) * inv * gamma[d] + beta[d];
            continue;
        }
        for (int64_t d = 0; d < D; d++) {
            const real h = (xr[d] - mean) * inv;
            hr[d] = h;
            yr[d] = h * gamma[d] + beta[d];
        }
    }
}

void layernorm_bprop(const real *dy, const real *xhat, const real *invstd, const real *gamma,
                     const real *residual, real *dx, real *dgamma, real *dbeta, double *work,
                     int64_t M, int64_t D)
{
    double *dg = work, *db = work + D;
    column_sums(SUM_AND_DOT, dy, xhat, NULL, M, D, db, dg, work_blocks(work, D));
    for (int64_t d = 0; d < D; d++) {
        dgamma[d] += (real)dg[d];
        dbeta[d] += (real)db[d];
    }
#pragma omp parallel for schedule(dynamic, nl_grain(D)) if (M * D >= NL_PARALLEL_MIN)
    for (int64_t m = 0; m < M; m++) {
        const real *dyr = dy + m * D, *hr = xhat + m * D;
        real *dxr = dx + m * D;
        double sg = 0, sgx = 0;
#pragma omp simd reduction(+ : sg, sgx)
        for (int64_t d = 0; d < D; d++) {
            const double g = (double)dyr[d] * (double)gamma[d];
            sg += g;
            sgx += g * (double)hr[d];
        }
        const real mg = (real)(sg / (double)D), mgx = (real)(sgx / (double)D);
        const real inv = invstd[m];
        if (residual) {
            const real *rr = residual + m * D;
            for (int64_t d = 0; d < D; d++)
                dxr[d] = rr[d] + inv * (dyr[d] * gamma[d] - mg - hr[d] * mgx);
        } else {
            for (int64_t d = 0; d < D; d++)
                dxr[d] = inv * (dyr[d] * gamma[d] - mg - hr[d] * mgx);
        }
    }
}

/* ---- layer norm on bfloat16 rows (norm.h: layernorm_fprop_bf16, layernorm_bprop_bf16) ---- */

/* One row of layernorm_fprop_bf16: the mean and variance from one pass of double sums of the
 * widened row shifted by its first element, as batch norm's statistics (one element is at
 * most sqrt(D) standard deviations from its row's mean, so the variance loses at most about
 * log2(D) of double's 53 bits; two passes, as layernorm_fprop's, cost a third more on rows
 * that fit in cache), then xhat, y (and total, the rounded x + residual) written by a second
 * pass; a row of at most BF16_ROW_STAGED columns is widened once (bf16_stage). */
static void ln_fprop_row_bf16(const uint16_t *x, const uint16_t *gamma, const uint16_t *beta,
                              uint16_t *y, uint16_t *xhat, uint16_t *invstd,
                              const uint16_t *residual, uint16_t *total, int64_t D, double eps)
{
    real row[BF16_ROW_STAGED] BF16_ALIGNED, buf[BF16_ROW_CHUNK] BF16_ALIGNED;
    real *staged = D <= BF16_ROW_STAGED ? row : NULL;
    const real shift =
        (real)bf16_to_f32(x[0]) + (residual ? (real)bf16_to_f32(residual[0]) : 0);
    double s1 = 0, s2 = 0;
    for (int64_t d0 = 0; d0 < D; d0 += BF16_ROW_CHUNK) {
        const int64_t n = bf16_chunk(D, d0);
        const real *v = bf16_stage(x, residual, staged, buf, d0, n, 1);
#pragma omp simd reduction(+ : s1, s2)
        for (int64_t k = 0; k < n; k++) {
            const double t = (double)(v[k] - shift);
            s1 += t;
            s2 += t * t;
        }
    }
    const double ms = s1 / (double)D, mu = (double)shift + ms;
    const double var = s2 / (double)D - ms * ms;
    const double sq = (var > 0 ? var : 0) * (double)D;
    const real inv = (real)(1.0 / sqrt(sq / (double)D + eps));
    const real mean = (real)mu;
    *invstd = f32_to_bf16((float)inv);
    for (int64_t d0 = 0; d0 < D; d0 += BF16_ROW_CHUNK) {
        const int64_t n = bf16_chunk(D, d0);
        const real *v = bf16_stage(x, residual, staged, buf, d0, n, 0);
        const uint16_t *g = gamma + d0, *b = beta + d0;
        uint16_t *yc = y + d0, *hc = xhat ? xhat + d0 : NULL;
        if (hc) {
#pragma omp simd
            for (int64_t k = 0; k < n; k++) {
                const real h = (v[k] - mean) * inv;
                hc[k] = f32_to_bf16((float)h);
                yc[k] = f32_to_bf16((float)(h * bf16_to_f32(g[k]) + bf16_to_f32(b[k])));
            }
        } else {
#pragma omp simd
            for (int64_t k = 0; k < n; k++)
                yc[k] = f32_to_bf16(
                    (float)((v[k] - mean) * inv * bf16_to_f32(g[k]) + bf16_to_f32(b[k])));
        }
        if (total)
            bf16_narrow(v, total + d0, n);
    }
}

void layernorm_fprop_bf16(const uint16_t *x, const uint16_t *gamma, const uint16_t *beta,
                          uint16_t *y, uint16_t *xhat, uint16_t *invstd,
                          const uint16_t *residual, uint16_t *total, int64_t M, int64_t D,
                          double eps)
{
#pragma omp parallel for schedule(dynamic, nl_grain(D)) if (M * D >= NL_PARALLEL_MIN)
    for (int64_t m = 0; m < M; m++)
        ln_fprop_row_bf16(x + m * D, gamma, beta, y + m * D, xhat ? xhat + m * D : NULL,
                          invstd + m, residual ? residual + m * D : NULL,
                          total ? total + m * D : NULL, D, eps);
}

/* The column sums of layernorm_bprop_bf16 add up NL_RUN rows in `real` (a bf16 product is
 * exact in float) before they enter the row block's double sums: double adds for every
 * element cost twice the vector work, and on two threads the double sums' loads and stores
 * kept the kernel from scaling at all (D 128: 113 us on two threads against 105 on one). */

/* One row of layernorm_bprop_bf16: dy and xhat widened (bf16_stage); the row's sums of
 * g = dy * gamma and g * xhat, and its terms of the run's column sums (db += dy,
 * dg += dy * xhat), in one pass; dx in a second. */
static void ln_bprop_row_bf16(const uint16_t *dy, const uint16_t *xhat, real inv,
                              const uint16_t *gamma, const uint16_t *residual, uint16_t *dx,
                              real *restrict db, real *restrict dg, int64_t D)
{
    real dyrow[BF16_ROW_STAGED] BF16_ALIGNED, hrow[BF16_ROW_STAGED] BF16_ALIGNED;
    real dbuf[BF16_ROW_CHUNK] BF16_ALIGNED, hbuf[BF16_ROW_CHUNK] BF16_ALIGNED;
    const int whole = D <= BF16_ROW_STAGED;
    double sg = 0, sgx = 0;
    for (int64_t d0 = 0; d0 < D; d0 += BF16_ROW_CHUNK) {
        const int64_t n = bf16_chunk(D, d0);
        const real *ds = bf16_stage(dy, NULL, whole ? dyrow : NULL, dbuf, d0, n, 1);
        const real *hs = bf16_stage(xhat, NULL, whole ? hrow : NULL, hbuf, d0, n, 1);
#pragma omp simd reduction(+ : sg, sgx)
        for (int64_t k = 0; k < n; k++) {
            const double g = (double)ds[k] * (double)bf16_to_f32(gamma[d0 + k]);
            sg += g;
            sgx += g * (double)hs[k];
            db[d0 + k] += ds[k];
            dg[d0 + k] += ds[k] * hs[k];
        }
    }
    const real mg = (real)(sg / (double)D), mgx = (real)(sgx / (double)D);
    for (int64_t d0 = 0; d0 < D; d0 += BF16_ROW_CHUNK) {
        const int64_t n = bf16_chunk(D, d0);
        const real *ds = bf16_stage(dy, NULL, whole ? dyrow : NULL, dbuf, d0, n, 0);
        const real *hs = bf16_stage(xhat, NULL, whole ? hrow : NULL, hbuf, d0, n, 0);
        const uint16_t *g = gamma + d0;
        uint16_t *o = dx + d0;
        if (residual) {
            const uint16_t *r = residual + d0;
#pragma omp simd
            for (int64_t k = 0; k < n; k++)
                o[k] = f32_to_bf16((float)(bf16_to_f32(r[k]) + inv * (ds[k] * bf16_to_f32(g[k])
                                                                      - mg - hs[k] * mgx)));
        } else {
#pragma omp simd
            for (int64_t k = 0; k < n; k++)
                o[k] = f32_to_bf16(
                    (float)(inv * (ds[k] * bf16_to_f32(g[k]) - mg - hs[k] * mgx)));
        }
    }
}

void layernorm_bprop_bf16(const uint16_t *dy, const uint16_t *xhat, const uint16_t *invstd,
                          const uint16_t *gamma, const uint16_t *residual, uint16_t *dx,
                          uint16_t *dgamma, uint16_t *dbeta, double *work, int64_t M, int64_t D)
{
    const int64_t nb = nl_blocks(M);
    double *blocks = work_blocks(work, D);
    real *runs = work_runs(work, M, D);
#pragma omp parallel for schedule(dynamic, 1) if (M * D >= NL_PARALLEL_MIN)
    for (int64_t blk = 0; blk < nb; blk++) {
        double *sums = blocks + blk * 2 * D;
        real *run = runs + blk * 2 * D;
        int64_t lo, hi;
        nl_split(M, blk, nb, &lo, &hi);
        for (int64_t d = 0; d < 2 * D; d++)
            sums[d] = 0;
        for (int64_t r0 = lo; r0 < hi; r0 += NL_RUN) {
            const int64_t r1 = hi - r0 < NL_RUN ? hi : r0 + NL_RUN;
            for (int64_t d = 0; d < 2 * D; d++)
                run[d] = 0;
            for (int64_t m = r0; m < r1; m++)
                ln_bprop_row_bf16(dy + m * D, xhat + m * D, bf16_to_f32(invstd[m]), gamma,
                                  residual ? residual + m * D : NULL, dx + m * D, run,
                                  run + D, D);
#pragma omp simd
            for (int64_t d = 0; d < 2 * D; d++)
                sums[d] += (double)run[d];
        }
    }
    for (int64_t d = 0; d < D; d++) {
        double sb = 0, sg = 0;
        for (int64_t blk = 0; blk < nb; blk++) {
            sb += blocks[blk * 2 * D + d];
            sg += blocks[blk * 2 * D + D + d];
        }
        dgamma[d] = f32_to_bf16((float)(bf16_to_f32(dgamma[d]) + (real)sg));
        dbeta[d] = f32_to_bf16((float)(bf16_to_f32(dbeta[d]) + (real)sb));
    }
}
