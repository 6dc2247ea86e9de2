/* RMSNorm, forward and backward (see rmsnorm.h).  A file of its own, apart from the batch
 * norm and layer norm kernels of norm.c. */
#include "common.h"
#include "rmsnorm.h"
#include "bf16_rows.h"

/* Columns of dgamma one task sums over every row (a multiple of the vector width). */
#define RMS_COLUMNS 64

void rmsnorm_fprop(const real *x, const real *gamma, real *y, real *xhat, real *rstd,
                   const real *residual, real *total, int64_t M, int64_t D, double eps)
{
#pragma omp parallel for schedule(dynamic, nl_grain(D)) if (M * D >= NL_PARALLEL_MIN)
    for (int64_t m = 0; m < M; m++) {
        const real *xr = x + m * D;
        real *yr = y + m * D, *hr = xhat ? xhat + m * D : NULL;
        double sq = 0;
        if (residual) {
            const real *rr = residual + m * D;
            real *tr = total + m * D;
#pragma omp simd reduction(+ : sq)
            for (int64_t d = 0; d < D; d++) {
                const real t = xr[d] + rr[d];
                tr[d] = t;
                sq += (double)t * (double)t;
            }
            xr = tr;
        } else {
#pragma omp simd reduction(+ : sq)
            for (int64_t d = 0; d < D; d++)
                sq += (double)xr[d] * (double)xr[d];
        }
        const real inv = (real)(1.0 / sqrt(sq / (double)D + eps));
        rstd[m] = inv;
        if (!hr) {
#pragma omp simd
            for (int64_t d = 0; d < D; d++)
                yr[d] = xr[d] * inv * gamma[d];
            continue;
        }
#pragma omp simd
        for (int64_t d = 0; d < D; d++) {
            const real h = xr[d] * inv;
            hr[d] = h;
            yr[d] = h * gamma[d];
        }
    }
}

/* acc[c] += dy[c] * xhat[c] (c < n), one row's terms of dgamma.  Not inlined: inlined into
 * the loop over the rows, GCC jams two rows into one loop that it does not vectorize. */
static __attribute__((noinline)) void rms_dgamma_row(double *restrict acc,
                                                     const real *restrict dy,
                                                     const real *restrict xhat, int64_t n)
{
#pragma omp simd
    for (int64_t c = 0; c < n; c++)
        acc[c] += (double)dy[c] * (double)xhat[c];
}

/* dgamma[c] += sum over rows of dy * xhat for the columns [c0, c1), in row order. */
static void rms_dgamma(const real *dy, const real *xhat, real *dgamma, int64_t M, int64_t D,
                       int64_t c0, int64_t c1)
{
    double acc[RMS_COLUMNS] = {0};
    const int64_t n = c1 - c0;
    for (int64_t m = 0; m < M; m++)
        rms_dgamma_row(acc, dy + m * D + c0, xhat + m * D + c0, n);
    for (int64_t c = 0; c < n; c++)
        dgamma[c0 + c] += (real)acc[c];
}

void rmsnorm_bprop(const real *dy, const real *xhat, const real *rstd, const real *gamma,
                   real *dx, real *dgamma, const real *residual, int64_t M, int64_t D)
{
    const int64_t tasks = (D + RMS_COLUMNS - 1) / RMS_COLUMNS;
#pragma omp parallel if (M * D >= NL_PARALLEL_MIN)
    {
#pragma omp for schedule(dynamic, 1) nowait
        for (int64_t t = 0; t < tasks; t++) {
            const int64_t c0 = t * RMS_COLUMNS;
            rms_dgamma(dy, xhat, dgamma, M, D, c0, c0 + RMS_COLUMNS < D ? c0 + RMS_COLUMNS : D);
        }
#pragma omp for schedule(dynamic, nl_grain(D))
        for (int64_t m = 0; m < M; m++) {
            const real *dyr = dy + m * D, *hr = xhat + m * D;
            real *dxr = dx + m * D;
            double sgx = 0;
#pragma omp simd reduction(+ : sgx)
            for (int64_t d = 0; d < D; d++)
                sgx += (double)dyr[d] * (double)gamma[d] * (double)hr[d];
            const real mgx = (real)(sgx / (double)D), inv = rstd[m];
            if (residual) {
                const real *rr = residual + m * D;
#pragma omp simd
                for (int64_t d = 0; d < D; d++)
                    dxr[d] = rr[d] + inv * (dyr[d] * gamma[d] - hr[d] * mgx);
            } else {
#pragma omp simd
                for (int64_t d = 0; d < D; d++)
                    dxr[d] = inv * (dyr[d] * gamma[d] - hr[d] * mgx);
            }
        }
    }
}

/* ---- RMSNorm on bfloat16 rows (rmsnorm.h: rmsnorm_fprop_bf16, rmsnorm_bprop_bf16) ---- */

/* One row of rmsnorm_fprop_bf16: the squares summed in double over the widened row, then
 * xhat, y and total written by a second pass, a chunk read before it is written (total may be
 * x); a row of at most BF16_ROW_STAGED columns is widened once (bf16_stage). */
static void rms_fprop_row_bf16(const uint16_t *x, const uint16_t *gamma, uint16_t *y,
                               uint16_t *xhat, uint16_t *rstd, const uint16_t *residual,
                               uint16_t *total, int64_t D, double eps)
{
    real row[BF16_ROW_STAGED] BF16_ALIGNED, buf[BF16_ROW_CHUNK] BF16_ALIGNED;
    real *staged = D <= BF16_ROW_STAGED ? row : NULL;
    double sq = 0;
    for (int64_t d0 = 0; d0 < D; d0 += BF16_ROW_CHUNK) {
        const int64_t n = bf16_chunk(D, d0);
        const real *v = bf16_stage(x, residual, staged, buf, d0, n, 1);
#pragma omp simd reduction(+ : sq)
        for (int64_t k = 0; k < n; k++)
            sq += (double)v[k] * (double)v[k];
    }
    const real inv = (real)(1.0 / sqrt(sq / (double)D + eps));
    *rstd = f32_to_bf16((float)inv);
    for (int64_t d0 = 0; d0 < D; d0 += BF16_ROW_CHUNK) {
        const int64_t n = bf16_chunk(D, d0);
        const real *v = bf16_stage(x, residual, staged, buf, d0, n, 0);
        const uint16_t *g = gamma + d0;
        uint16_t *yc = y + d0, *hc = xhat ? xhat + d0 : NULL;
        if (hc) {
#pragma omp simd
            for (int64_t k = 0; k < n; k++) {
                const real h = v[k] * inv;
                hc[k] = f32_to_bf16((float)h);
                yc[k] = f32_to_bf16((float)(h * bf16_to_f32(g[k])));
            }
        } else {
#pragma omp simd
            for (int64_t k = 0; k < n; k++)
                yc[k] = f32_to_bf16((float)(v[k] * inv * bf16_to_f32(g[k])));
        }
        if (total)
            bf16_narrow(v, total + d0, n);
    }
}

void rmsnorm_fprop_bf16(const uint16_t *x, const uint16_t *gamma, uint16_t *y,
                        uint16_t *xhat, uint16_t *rstd, const uint16_t *residual,
                        uint16_t *total, int64_t M, int64_t D, double eps)
{
#pragma omp parallel for schedule(dynamic, nl_grain(D)) if (M * D >= NL_PARALLEL_MIN)
    for (int64_t m = 0; m < M; m++)
        rms_fprop_row_bf16(x + m * D, gamma, y + m * D, xhat ? xhat + m * D : NULL, rstd + m,
                           residual ? residual + m * D : NULL, total ? total + m * D : NULL,
                           D, eps);
}

/* run[c] += dy[c] * xhat[c] (bf16: the product exact in float), in `real`. */
static __attribute__((noinline)) void rms_dgamma_row_bf16(real *restrict run,
                                                          const uint16_t *restrict dy,
                                                          const uint16_t *restrict xhat,
                                                          int64_t n)
{
#pragma omp simd
    for (int64_t c = 0; c < n; c++)
        run[c] += (real)(bf16_to_f32(dy[c]) * bf16_to_f32(xhat[c]));
}

/* dgamma[c] += sum over rows of dy * xhat (bf16) for the columns [c0, c1), in row order: runs
 * of NL_RUN rows summed in `real`, the runs in double (as layernorm_bprop_bf16's column sums;
 * a double add for every element cost twice the vector work). */
static void rms_dgamma_bf16(const uint16_t *dy, const uint16_t *xhat, uint16_t *dgamma,
                            int64_t M, int64_t D, int64_t c0, int64_t c1)
{
    double acc[RMS_COLUMNS] = {0};
    real run[RMS_COLUMNS];
    const int64_t n = c1 - c0;
    for (int64_t m0 = 0; m0 < M; m0 += NL_RUN) {
        const int64_t m1 = M - m0 < NL_RUN ? M : m0 + NL_RUN;
        for (int64_t c = 0; c < n; c++)
            run[c] = 0;
        for (int64_t m = m0; m < m1; m++)
            rms_dgamma_row_bf16(run, dy + m * D + c0, xhat + m * D + c0, n);
        for (int64_t c = 0; c < n; c++)
            acc[c] += (double)run[c];
    }
    for (int64_t c = 0; c < n; c++)
        dgamma[c0 + c] = f32_to_bf16((float)(bf16_to_f32(dgamma[c0 + c]) + (real)acc[c]));
}

/* One row of rmsnorm_bprop_bf16's dx: the row's sum of dy * gamma * xhat, then dx; dy and
 * xhat widened by bf16_stage. */
static void rms_bprop_row_bf16(const uint16_t *dy, const uint16_t *xhat, real inv,
                               const uint16_t *gamma, const uint16_t *residual, uint16_t *dx,
                               int64_t D)
{
    real dyrow[BF16_ROW_STAGED] BF16_ALIGNED, hrow[BF16_ROW_STAGED] BF16_ALIGNED;
    real dbuf[BF16_ROW_CHUNK] BF16_ALIGNED, hbuf[BF16_ROW_CHUNK] BF16_ALIGNED;
    const int whole = D <= BF16_ROW_STAGED;
    double sgx = 0;
    for (int64_t d0 = 0; d0 < D; d0 += BF16_ROW_CHUNK) {
        const int64_t n = bf16_chunk(D, d0);
        const real *ds = bf16_stage(dy, NULL, whole ? dyrow : NULL, dbuf, d0, n, 1);
        const real *hs = bf16_stage(xhat, NULL, whole ? hrow : NULL, hbuf, d0, n, 1);
#pragma omp simd reduction(+ : sgx)
        for (int64_t k = 0; k < n; k++)
            sgx += (double)ds[k] * (double)bf16_to_f32(gamma[d0 + k]) * (double)hs[k];
    }
    const real mgx = (real)(sgx / (double)D);
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
                o[k] = f32_to_bf16((float)(bf16_to_f32(r[k])
                                           + inv * (ds[k] * bf16_to_f32(g[k]) - hs[k] * mgx)));
        } else {
#pragma omp simd
            for (int64_t k = 0; k < n; k++)
                o[k] = f32_to_bf16((float)(inv * (ds[k] * bf16_to_f32(g[k]) - hs[k] * mgx)));
        }
    }
}

void rmsnorm_bprop_bf16(const uint16_t *dy, const uint16_t *xhat, const uint16_t *rstd,
                        const uint16_t *gamma, uint16_t *dx, uint16_t *dgamma,
                        const uint16_t *residual, int64_t M, int64_t D)
{
    const int64_t tasks = (D + RMS_COLUMNS - 1) / RMS_COLUMNS;
#pragma omp parallel if (M * D >= NL_PARALLEL_MIN)
    {
#pragma omp for schedule(dynamic, 1) nowait
        for (int64_t t = 0; t < tasks; t++) {
            const int64_t c0 = t * RMS_COLUMNS;
            rms_dgamma_bf16(dy, xhat, dgamma, M, D, c0,
                            c0 + RMS_COLUMNS < D ? c0 + RMS_COLUMNS : D);
        }
#pragma omp for schedule(dynamic, nl_grain(D))
        for (int64_t m = 0; m < M; m++)
            rms_bprop_row_bf16(dy + m * D, xhat + m * D, bf16_to_f32(rstd[m]), gamma,
                               residual ? residual + m * D : NULL, dx + m * D, D);
    }
}
