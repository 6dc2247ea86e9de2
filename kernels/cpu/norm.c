/* Batch norm and layer norm, forward and backward (see norm.h). */
#include "common.h"
#include "norm.h"

enum { SHIFTED_SQUARES, SUM_AND_DOT };

/* SUM_AND_DOT: rows summed in `real` before their sums are added into the double totals:
 * short runs keep float rounding negligible while the inner loop runs at full float vector
 * width.  SHIFTED_SQUARES accumulates in double (see column_sums). */
#define RUN 32

/* The parts of a kernel's `work` (norm_work_size(M, C) doubles, see norm.h): 2 C double
 * sums, then 3 C `real` per-channel factors (rounded up to whole doubles), then the block sums
 * of column_sums over 2 C columns (nl_block_sums_size in common.h). */
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

int64_t norm_work_size(int64_t M, int64_t C)
{
    return 2 * C + factors_size(C) + nl_block_sums_size(M, 2 * C);
}

/* Column sums over the rows of (M, C) arrays a, b (in fixed blocks, see nl_blocks):
 *   SHIFTED_SQUARES: out1[c] = sum_m (a - a[0, c]),  out2[c] = sum_m (a - a[0, c])^2
 *   SUM_AND_DOT:     out1[c] = sum_m a,              out2[c] = sum_m a * b
 * SUM_AND_DOT with a mask (M, C) (or NULL) counts a only where the mask is > 0.  `blocks`:
 * nl_block_sums_size(M, 2 C) doubles of scratch (work_blocks). */
static void column_sums(int mode, const real *a, const real *b, const real *mask, int64_t M,
                        int64_t C, double *out1, double *out2, double *blocks)
{
    const int64_t nb = nl_blocks(M);
    double *part = blocks;
    real *run = nl_block_sums_runs(blocks, M, 2 * C);
#pragma omp parallel for schedule(dynamic, 1) if (M * C >= NL_PARALLEL_MIN)
    for (int64_t blk = 0; blk < nb; blk++) {
        double *s1 = part + (size_t)blk * 2 * (size_t)C, *s2 = s1 + C;
        real *r1 = run + (size_t)blk * 2 * (size_t)C, *r2 = r1 + C;
        int64_t lo, hi;
        nl_split(M, blk, nb, &lo, &hi);
        for (int64_t c = 0; c < 2 * C; c++)
            s1[c] = 0;
        if (mode == SHIFTED_SQUARES) {
            /* Statistics in double throughout (x - x[0] computed in double), so they do not
             * depend on how the rows are blocked: batch norm over the whole batch and over
             * the shards of data-parallel ranks (batchnorm_moments) agree to double rounding. */
            for (int64_t m = lo; m < hi; m++) {
                const real *ar = a + m * C;
                for (int64_t c = 0; c < C; c++) {
                    const double t = (double)ar[c] - (double)a[c];
                    s1[c] += t;
                    s2[c] += t * t;
                }
            }
            continue;
        }
        for (int64_t m0 = lo; m0 < hi; m0 += RUN) {
            const int64_t m1 = m0 + RUN < hi ? m0 + RUN : hi;
            for (int64_t c = 0; c < C; c++)
                r1[c] = r2[c] = 0;
            for (int64_t m = m0; m < m1; m++) {
                const real *ar = a + m * C;
                if (mask == NULL) {
                    const real *br = b + m * C;
                    for (int64_t c = 0; c < C; c++) {
                        r1[c] += ar[c];
                        r2[c] += ar[c] * br[c];
                    }
                } else {
                    const real *br = b + m * C, *kr = mask + m * C;
                    for (int64_t c = 0; c < C; c++) {
                        const real v = kr[c] > 0 ? ar[c] : 0;
                        r1[c] += v;
                        r2[c] += v * br[c];
                    }
                }
            }
            for (int64_t c = 0; c < C; c++) {
                s1[c] += (double)r1[c];
                s2[c] += (double)r2[c];
            }
        }
    }
    for (int64_t c = 0; c < C; c++) {
        double a1 = 0, a2 = 0;
        for (int64_t blk = 0; blk < nb; blk++) {
            a1 += part[(size_t)blk * 2 * (size_t)C + c];
            a2 += part[(size_t)blk * 2 * (size_t)C + C + c];
        }
        out1[c] = a1;
        out2[c] = a2;
    }
}

/* xhat = (x - mean) * invstd and y = gamma * xhat + beta over (M, C); with relu, y is
 * max(y, 0) (NaN stays NaN). */
static void bn_apply(const real *x, const real *gamma, const real *beta, real *y, real *xhat,
                     const real *mean, const real *invstd, int64_t M, int64_t C, int relu)
{
#pragma omp parallel for schedule(dynamic, nl_grain(C)) if (M * C >= NL_PARALLEL_MIN)
    for (int64_t m = 0; m < M; m++) {
        const real *xr = x + m * C;
        real *yr = y + m * C, *hr = xhat + m * C;
        if (relu) {
            for (int64_t c = 0; c < C; c++) {
                const real h = (xr[c] - mean[c]) * invstd[c], v = h * gamma[c] + beta[c];
                hr[c] = h;
                yr[c] = v < 0 ? 0 : v;
            }
        } else {
            for (int64_t c = 0; c < C; c++) {
                const real h = (xr[c] - mean[c]) * invstd[c];
                hr[c] = h;
                yr[c] = h * gamma[c] + beta[c];
            }
        }
    }
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
        const double mu = (double)x[c] + shift;
        mean[c] = (real)mu;
        invstd[c] = (real)(1.0 / sqrt(var + eps));
        running_mean[c] = (real)(momentum * running_mean[c] + (1.0 - momentum) * mu);
        running_var[c] = (real)(momentum * running_var[c] + (1.0 - momentum) * var *
                                ((double)M / (double)(M > 1 ? M - 1 : 1)));
    }
    bn_apply(x, gamma, beta, y, xhat, mean, invstd, M, C, relu);
}

void batchnorm_moments(const real *x, int64_t M, int64_t C, double *mean, double *m2,
                       double *work)
{
    column_sums(SHIFTED_SQUARES, x, NULL, NULL, M, C, mean, m2, work_blocks(work, C));
    for (int64_t c = 0; c < C; c++) {
        const double s1 = mean[c];
        mean[c] = (double)x[c] + s1 / (double)M;
        m2[c] = m2[c] - s1 * (s1 / (double)M);
        if (m2[c] < 0)
            m2[c] = 0;
    }
}

void batchnorm_apply(const real *x, const real *gamma, const real *beta, real *y, real *xhat,
                     const real *mean, const real *invstd, int64_t M, int64_t C, int relu)
{
    bn_apply(x, gamma, beta, y, xhat, mean, invstd, M, C, relu);
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
    bn_apply(x, gamma, beta, y, xhat, mean, invstd, M, C, relu);
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
    const real m = (real)M, acc = (real)beta_acc;
    /* The order of the reference, (M * dy - sum dy) first, so it cancels exactly for M = 1. */
#pragma omp parallel for schedule(dynamic, nl_grain(C)) if (M * C >= NL_PARALLEL_MIN)
    for (int64_t r = 0; r < M; r++) {
        const real *dyr = dy + r * C, *hr = xhat + r * C;
        real *dxr = dx + r * C;
        if (relu_y != NULL) {
            const real *yr = relu_y + r * C;
            for (int64_t c = 0; c < C; c++) {
                const real g = yr[c] > 0 ? dyr[c] : 0;
                dxr[c] = (acc == 0 ? 0 : acc * dxr[c])
                         + k[c] * ((m * g - rdb[c]) - hr[c] * rdg[c]);
            }
        } else if (acc == 0) {
            for (int64_t c = 0; c < C; c++)
                dxr[c] = k[c] * ((m * dyr[c] - rdb[c]) - hr[c] * rdg[c]);
        } else {
            for (int64_t c = 0; c < C; c++)
                dxr[c] = acc * dxr[c] + k[c] * ((m * dyr[c] - rdb[c]) - hr[c] * rdg[c]);
        }
    }
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
