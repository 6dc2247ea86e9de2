/* RMSNorm, forward and backward (see rmsnorm.h).  A file of its own, apart from the batch
 * norm and layer norm kernels of norm.c. */
#include "common.h"
#include "rmsnorm.h"

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
