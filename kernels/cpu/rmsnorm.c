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

/* dgamma[c] += sum over rows of dy * xhat for the columns [c0, c1), in row order. */
static void rms_dgamma(const real *dy, const real *xhat, real *dgamma, int64_t M, int64_t D,
                       int64_t c0, int64_t c1)
{
    double acc[RMS_COLUMNS] = {0};
    const int64_t n = c1 - c0;
    for (int64_t m = 0; m < M; m++) {
        const real *dyr = dy + m * D + c0, *hr = xhat + m * D + c0;
#pragma omp simd
        for (int64_t c = 0; c < n; c++)
            acc[c] += (double)dyr[c] * (double)hr[c];
    }
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

/* Chunk [d0, d0 + n) of row x (+ residual) widened into buf. */
static inline void rms_stage(const uint16_t *x, const uint16_t *residual, real *buf,
                             int64_t d0, int64_t n)
{
    if (residual)
        bf16_widen_sum(x + d0, residual + d0, buf, n);
    else
        bf16_widen(x + d0, buf, n);
}

/* One row of rmsnorm_fprop_bf16: the squares summed in double over the widened row, then
 * xhat, y and total written by a second pass that widens the row again, a chunk read before
 * it is written (total may be x). */
static void rms_fprop_row_bf16(const uint16_t *x, const real *gamma, uint16_t *y,
                               uint16_t *xhat, real *rstd, const uint16_t *residual,
                               uint16_t *total, int64_t D, double eps)
{
    real buf[BF16_ROW_CHUNK], hs[BF16_ROW_CHUNK], ys[BF16_ROW_CHUNK];
    double sq = 0;
    for (int64_t d0 = 0; d0 < D; d0 += BF16_ROW_CHUNK) {
        const int64_t n = bf16_chunk(D, d0);
        rms_stage(x, residual, buf, d0, n);
#pragma omp simd reduction(+ : sq)
        for (int64_t k = 0; k < n; k++)
            sq += (double)buf[k] * (double)buf[k];
    }
    const real inv = (real)(1.0 / sqrt(sq / (double)D + eps));
    *rstd = inv;
    for (int64_t d0 = 0; d0 < D; d0 += BF16_ROW_CHUNK) {
        const int64_t n = bf16_chunk(D, d0);
        rms_stage(x, residual, buf, d0, n);
#pragma omp simd
        for (int64_t k = 0; k < n; k++) {
            const real h = buf[k] * inv;
            hs[k] = h;
            ys[k] = h * gamma[d0 + k];
        }
        if (xhat)
            bf16_narrow(hs, xhat + d0, n);
        bf16_narrow(ys, y + d0, n);
        if (total)
            bf16_narrow(buf, total + d0, n);
    }
}

void rmsnorm_fprop_bf16(const uint16_t *x, const real *gamma, uint16_t *y, uint16_t *xhat,
                        real *rstd, const uint16_t *residual, uint16_t *total, int64_t M,
                        int64_t D, double eps)
{
#pragma omp parallel for schedule(dynamic, nl_grain(D)) if (M * D >= NL_PARALLEL_MIN)
    for (int64_t m = 0; m < M; m++)
        rms_fprop_row_bf16(x + m * D, gamma, y + m * D, xhat ? xhat + m * D : NULL, rstd + m,
                           residual ? residual + m * D : NULL, total ? total + m * D : NULL,
                           D, eps);
}

/* dgamma[c] += sum over rows of dy * xhat (bf16) for the columns [c0, c1), in row order, in
 * double (a bf16 product is exact in float). */
static void rms_dgamma_bf16(const uint16_t *dy, const uint16_t *xhat, real *dgamma, int64_t M,
                            int64_t D, int64_t c0, int64_t c1)
{
    double acc[RMS_COLUMNS] = {0};
    real ds[RMS_COLUMNS], hs[RMS_COLUMNS];
    const int64_t n = c1 - c0;
    for (int64_t m = 0; m < M; m++) {
        bf16_widen(dy + m * D + c0, ds, n);
        bf16_widen(xhat + m * D + c0, hs, n);
#pragma omp simd
        for (int64_t c = 0; c < n; c++)
            acc[c] += (double)(ds[c] * hs[c]);
    }
    for (int64_t c = 0; c < n; c++)
        dgamma[c0 + c] += (real)acc[c];
}

/* One row of rmsnorm_bprop_bf16's dx: the row's sum of dy * gamma * xhat, then dx. */
static void rms_bprop_row_bf16(const uint16_t *dy, const uint16_t *xhat, real inv,
                               const real *gamma, const uint16_t *residual, uint16_t *dx,
                               int64_t D)
{
    real ds[BF16_ROW_CHUNK], hs[BF16_ROW_CHUNK], rs[BF16_ROW_CHUNK], out[BF16_ROW_CHUNK];
    double sgx = 0;
    for (int64_t d0 = 0; d0 < D; d0 += BF16_ROW_CHUNK) {
        const int64_t n = bf16_chunk(D, d0);
        bf16_widen(dy + d0, ds, n);
        bf16_widen(xhat + d0, hs, n);
#pragma omp simd reduction(+ : sgx)
        for (int64_t k = 0; k < n; k++)
            sgx += (double)ds[k] * (double)gamma[d0 + k] * (double)hs[k];
    }
    const real mgx = (real)(sgx / (double)D);
    for (int64_t d0 = 0; d0 < D; d0 += BF16_ROW_CHUNK) {
        const int64_t n = bf16_chunk(D, d0);
        bf16_widen(dy + d0, ds, n);
        bf16_widen(xhat + d0, hs, n);
        if (residual)
            bf16_widen(residual + d0, rs, n);
        else
            memset(rs, 0, (size_t)n * sizeof(real));
#pragma omp simd
        for (int64_t k = 0; k < n; k++)
            out[k] = rs[k] + inv * (ds[k] * gamma[d0 + k] - hs[k] * mgx);
        bf16_narrow(out, dx + d0, n);
    }
}

void rmsnorm_bprop_bf16(const uint16_t *dy, const uint16_t *xhat, const real *rstd,
                        const real *gamma, uint16_t *dx, real *dgamma, const uint16_t *residual,
                        int64_t M, int64_t D)
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
            rms_bprop_row_bf16(dy + m * D, xhat + m * D, rstd[m], gamma,
                               residual ? residual + m * D : NULL, dx + m * D, D);
    }
}
