/* Batch norm's elementwise passes over the rows of (M, C) (an NHWC batch viewed as
 * (N*H*W, C)): the forward's normalize + affine (+ ReLU) and the backward's input gradient,
 * each one pass over contiguous memory.  The array is read as periods of cs_period(C) lanes
 * (column_sums.h), the per-channel operands repeated along a period once per call, so the
 * inner loops run over whole vectors whatever C is.  Included by norm.c; not a cffi header. */
#ifndef NEONLITE_BATCHNORM_NHWC_H
#define NEONLITE_BATCHNORM_NHWC_H

#include "column_sums.h"

/* Periods an iteration of the elementwise loops takes: about NL_GRAIN elements. */
static inline int64_t bn_periods_per_step(int64_t P)
{
    return P >= NL_GRAIN ? 1 : NL_GRAIN / P;
}

/* n elements from lane 0 of a period: h = (x - mu) * inv, y = h * g + bt, then y = max(y, 0)
 * when relu (NaN stays NaN); the operands along the same lanes. */
static inline void bn_normalize_lanes(const real *restrict x, const real *restrict mu,
                                      const real *restrict inv, const real *restrict g,
                                      const real *restrict bt, real *restrict y,
                                      real *restrict h, int64_t n, int relu)
{
    if (relu) {
        for (int64_t j = 0; j < n; j++) {
            const real t = (x[j] - mu[j]) * inv[j], v = t * g[j] + bt[j];
            h[j] = t;
            y[j] = v < 0 ? 0 : v;
        }
    } else {
        for (int64_t j = 0; j < n; j++) {
            const real t = (x[j] - mu[j]) * inv[j];
            h[j] = t;
            y[j] = t * g[j] + bt[j];
        }
    }
}

/* xhat = (x - mean) * invstd and y = gamma * xhat + beta over (M, C); with relu, y is
 * max(y, 0) (NaN stays NaN).  Per-channel operands (C,). */
static void bn_normalize(const real *x, const real *gamma, const real *beta, real *y,
                         real *xhat, const real *mean, const real *invstd, int64_t M, int64_t C,
                         int relu)
{
    if (M * C == 0)
        return;
    const int64_t P = cs_period(C), total = M * C, step = bn_periods_per_step(P) * P;
    real buf[4][CS_PERIOD_MAX];
    const real *mu = cs_lanes(mean, C, P, buf[0]), *inv = cs_lanes(invstd, C, P, buf[1]);
    const real *g = cs_lanes(gamma, C, P, buf[2]), *bt = cs_lanes(beta, C, P, buf[3]);
#pragma omp parallel for schedule(dynamic, 1) if (total >= NL_PARALLEL_MIN)
    for (int64_t e0 = 0; e0 < total; e0 += step) {
        const int64_t e1 = e0 + step < total ? e0 + step : total;
        for (int64_t e = e0; e < e1; e += P) {
            const int64_t n = e1 - e < P ? e1 - e : P;
            bn_normalize_lanes(x + e, mu, inv, g, bt, y + e, xhat + e, n, relu);
        }
    }
}

/* n elements from lane 0 of a period: dx = acc * dx + k * ((m * dy' - db) - h * dg), dy'
 * = dy, or where mask (non-NULL) is not > 0, 0; acc == 0 writes the term alone (old NaNs in
 * dx do not survive). */
static inline void bn_input_grad_lanes(const real *restrict dy, const real *restrict h,
                                       const real *restrict mask, const real *restrict k,
                                       const real *restrict db, const real *restrict dg,
                                       real *restrict dx, real m, real acc, int64_t n)
{
    if (mask != NULL && acc == 0) {
        for (int64_t j = 0; j < n; j++) {
            const real g = mask[j] > 0 ? dy[j] : 0;
            dx[j] = k[j] * ((m * g - db[j]) - h[j] * dg[j]);
        }
    } else if (mask != NULL) {
        for (int64_t j = 0; j < n; j++) {
            const real g = mask[j] > 0 ? dy[j] : 0;
            dx[j] = acc * dx[j] + k[j] * ((m * g - db[j]) - h[j] * dg[j]);
        }
    } else if (acc == 0) {
        for (int64_t j = 0; j < n; j++)
            dx[j] = k[j] * ((m * dy[j] - db[j]) - h[j] * dg[j]);
    } else {
        for (int64_t j = 0; j < n; j++)
            dx[j] = acc * dx[j] + k[j] * ((m * dy[j] - db[j]) - h[j] * dg[j]);
    }
}

/* dx (M, C) = acc * dx + k * ((M * dy' - db) - xhat * dg) with per-channel k, db, dg (C,);
 * dy' = dy masked by mask > 0 (mask (M, C) or NULL).  (M * dy - db) first, as the reference
 * orders it, so it cancels exactly for M = 1. */
static void bn_input_grad(const real *dy, const real *xhat, const real *mask, const real *k,
                          const real *db, const real *dg, real *dx, int64_t M, int64_t C,
                          real acc)
{
    if (M * C == 0)
        return;
    const int64_t P = cs_period(C), total = M * C, step = bn_periods_per_step(P) * P;
    const real m = (real)M;
    real buf[3][CS_PERIOD_MAX];
    const real *kl = cs_lanes(k, C, P, buf[0]), *dbl = cs_lanes(db, C, P, buf[1]);
    const real *dgl = cs_lanes(dg, C, P, buf[2]);
#pragma omp parallel for schedule(dynamic, 1) if (total >= NL_PARALLEL_MIN)
    for (int64_t e0 = 0; e0 < total; e0 += step) {
        const int64_t e1 = e0 + step < total ? e0 + step : total;
        for (int64_t e = e0; e < e1; e += P) {
            const int64_t n = e1 - e < P ? e1 - e : P;
            bn_input_grad_lanes(dy + e, xhat + e, mask ? mask + e : NULL, kl, dbl, dgl,
                                dx + e, m, acc, n);
        }
    }
}

#endif
