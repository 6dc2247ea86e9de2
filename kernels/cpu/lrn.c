/* Local response normalization (see lrn.h): one row per iteration, each channel's window
 * summed directly (depth is small: 5 in AlexNet). */
#include "common.h"
#include "lrn.h"

void lrn_fprop(const real *x, real *y, real *scale, int64_t M, int64_t C, int depth,
               double alpha, double beta, double k)
{
    const int64_t before = depth / 2, after = (depth - 1) / 2;
    const real a = (real)(alpha / depth), b = (real)beta, kk = (real)k;
#pragma omp parallel for schedule(static) if (M * C * depth >= NL_PARALLEL_MIN)
    for (int64_t m = 0; m < M; m++) {
        const real *xr = x + m * C;
        for (int64_t c = 0; c < C; c++) {
            const int64_t lo = c - before < 0 ? 0 : c - before;
            const int64_t hi = c + after >= C ? C - 1 : c + after;
            real sum = 0;
            for (int64_t j = lo; j <= hi; j++)
                sum += xr[j] * xr[j];
            const real s = kk + a * sum;
            scale[m * C + c] = s;
            y[m * C + c] = xr[c] * pow(s, -b);
        }
    }
}

void lrn_bprop(const real *x, const real *scale, const real *dy, real *dx, int64_t M,
               int64_t C, int depth, double alpha, double beta)
{
    const int64_t before = (depth - 1) / 2, after = depth / 2;
    const real b = (real)beta, coef = (real)(2.0 * alpha * beta / depth);
#pragma omp parallel for schedule(static) if (M * C * depth >= NL_PARALLEL_MIN)
    for (int64_t m = 0; m < M; m++) {
        const real *xr = x + m * C, *sr = scale + m * C, *dr = dy + m * C;
        for (int64_t i = 0; i < C; i++) {
            const int64_t lo = i - before < 0 ? 0 : i - before;
            const int64_t hi = i + after >= C ? C - 1 : i + after;
            real sum = 0;
            for (int64_t j = lo; j <= hi; j++)
                sum += dr[j] * xr[j] * pow(sr[j], -b - 1);
            dx[m * C + i] = dr[i] * pow(sr[i], -b) - coef * xr[i] * sum;
        }
    }
}
