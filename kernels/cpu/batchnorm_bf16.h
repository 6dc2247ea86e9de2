/* Batch norm's training forward and backward on bfloat16 operands (uint16 bit patterns; see
 * norm.h): every (M, C) and (1, C) operand is bf16, widened while its rows are read, the sums
 * over the rows in double in fixed row blocks (cs_blocks, column_sums.h: the same bits on any
 * number of threads), the per-channel factors and the elementwise arithmetic in `real` (the
 * float32 variant's), each written element rounded to nearest even once.  No float32 copy of
 * an operand is made.  The work layout is norm.c's (norm_work_size): the 2 C column sums, the
 * 3 C per-channel `real` factors, then the blocks' sums.  Included by norm.c after its work
 * helpers; not a cffi header. */
#ifndef NEONLITE_BATCHNORM_BF16_H
#define NEONLITE_BATCHNORM_BF16_H

#include "bf16_bits.h"

static inline real bn_wide(uint16_t bits)
{
    return (real)bf16_to_f32(bits);
}

static inline uint16_t bn_round(real v)
{
    return f32_to_bf16((float)v);
}

/* o1[c], o2[c] (C each) = the sums over the rows of (M, C) bf16 arrays, in double:
 * SHIFTED_SQUARES: of t = a - a[row 0] and t^2 (b unused); SUM_AND_DOT: of g and g * b, g = a
 * where mask (or NULL) > 0, else 0.  Block blk of cs_blocks(M, C) sums into blocks + 2 C blk,
 * the blocks added in order. */
static void bn_sums_bf16(int mode, const uint16_t *a, const uint16_t *b, const uint16_t *mask,
                         int64_t M, int64_t C, double *o1, double *o2, double *blocks)
{
    const int64_t nb = cs_blocks(M, C);
#pragma omp parallel for schedule(dynamic, 1) if (M * C >= NL_PARALLEL_MIN)
    for (int64_t blk = 0; blk < nb; blk++) {
        int64_t lo, hi;
        nl_split(M, blk, nb, &lo, &hi);
        double *s1 = blocks + blk * 2 * C, *s2 = s1 + C;
        for (int64_t c = 0; c < C; c++)
            s1[c] = s2[c] = 0;
        for (int64_t m = lo; m < hi; m++) {
            const uint16_t *ar = a + m * C;
            if (mode == SHIFTED_SQUARES) {
#pragma omp simd
                for (int64_t c = 0; c < C; c++) {
                    const double t = (double)bn_wide(ar[c]) - (double)bn_wide(a[c]);
                    s1[c] += t;
                    s2[c] += t * t;
                }
                continue;
            }
            const uint16_t *br = b + m * C, *kr = mask ? mask + m * C : NULL;
            if (kr) {
#pragma omp simd
                for (int64_t c = 0; c < C; c++) {
                    /* the bits of a, or of +0 where the mask is not > 0, branch-free */
                    const uint16_t keep = (uint16_t)-(int)(bn_wide(kr[c]) > 0);
                    const double g = (double)bn_wide((uint16_t)(ar[c] & keep));
                    s1[c] += g;
                    s2[c] += g * (double)bn_wide(br[c]);
                }
                continue;
            }
#pragma omp simd
            for (int64_t c = 0; c < C; c++) {
                const double g = (double)bn_wide(ar[c]);
                s1[c] += g;
                s2[c] += g * (double)bn_wide(br[c]);
            }
        }
    }
    for (int64_t c = 0; c < C; c++) {
        double a1 = 0, a2 = 0;
        for (int64_t blk = 0; blk < nb; blk++) {
            a1 += blocks[blk * 2 * C + c];
            a2 += blocks[blk * 2 * C + C + c];
        }
        o1[c] = a1;
        o2[c] = a2;
    }
}

void batchnorm_fprop_train_bf16(const uint16_t *x, const uint16_t *gamma, const uint16_t *beta,
                                uint16_t *y, uint16_t *xhat, uint16_t *mean, uint16_t *invstd,
                                uint16_t *running_mean, uint16_t *running_var, double *work,
                                int64_t M, int64_t C, double eps, double momentum, int relu)
{
    double *s1 = work, *s2 = work + C;
    real *mu = work_factors(work, C), *inv = mu + C;
    if (M < 1) {
        for (int64_t c = 0; c < C; c++)
            s1[c] = s2[c] = 0;
    } else {
        bn_sums_bf16(SHIFTED_SQUARES, x, NULL, NULL, M, C, s1, s2, work_blocks(work, C));
    }
    for (int64_t c = 0; c < C; c++) {
        const double shift = s1[c] / (double)M;
        double var = s2[c] / (double)M - shift * shift;
        if (var < 0)
            var = 0;
        const double m = (M > 0 ? (double)bn_wide(x[c]) : 0.0) + shift;
        mu[c] = (real)m;
        inv[c] = (real)(1.0 / sqrt(var + eps));
        mean[c] = bn_round(mu[c]);
        invstd[c] = bn_round(inv[c]);
        running_mean[c] = bn_round((real)(momentum * bn_wide(running_mean[c])
                                          + (1.0 - momentum) * m));
        running_var[c] = bn_round((real)(momentum * bn_wide(running_var[c]) + (1.0 - momentum)
                                         * var * ((double)M / (double)(M > 1 ? M - 1 : 1))));
    }
#pragma omp parallel for schedule(dynamic, nl_grain(C)) if (M * C >= NL_PARALLEL_MIN)
    for (int64_t m = 0; m < M; m++) {
        const uint16_t *xr = x + m * C;
        uint16_t *yr = y + m * C, *hr = xhat + m * C;
#pragma omp simd
        for (int64_t c = 0; c < C; c++) {
            const real t = (bn_wide(xr[c]) - mu[c]) * inv[c];
            const real v = t * bn_wide(gamma[c]) + bn_wide(beta[c]);
            hr[c] = bn_round(t);
            yr[c] = bn_round(relu && v < 0 ? 0 : v);
        }
    }
}

void batchnorm_bprop_bf16(const uint16_t *dy, const uint16_t *xhat, const uint16_t *invstd,
                          const uint16_t *gamma, uint16_t *dx, uint16_t *dgamma,
                          uint16_t *dbeta, double *work, int64_t M, int64_t C, double beta_acc,
                          const uint16_t *relu_y)
{
    double *db = work, *dg = work + C;
    real *k = work_factors(work, C);
    real *rdb = k + C, *rdg = k + 2 * C;
    if (M < 1) {
        for (int64_t c = 0; c < C; c++)
            db[c] = dg[c] = 0;
    } else {
        bn_sums_bf16(SUM_AND_DOT, dy, xhat, relu_y, M, C, db, dg, work_blocks(work, C));
    }
    for (int64_t c = 0; c < C; c++) {
        dgamma[c] = bn_round(bn_wide(dgamma[c]) + (real)dg[c]);
        dbeta[c] = bn_round(bn_wide(dbeta[c]) + (real)db[c]);
        k[c] = (real)((double)bn_wide(gamma[c]) * (double)bn_wide(invstd[c]) / (double)M);
        rdb[c] = (real)db[c];
        rdg[c] = (real)dg[c];
    }
    const real mr = (real)M, acc = (real)beta_acc;
#pragma omp parallel for schedule(dynamic, nl_grain(C)) if (M * C >= NL_PARALLEL_MIN)
    for (int64_t m = 0; m < M; m++) {
        const uint16_t *dyr = dy + m * C, *hr = xhat + m * C;
        const uint16_t *yr = relu_y ? relu_y + m * C : NULL;
        uint16_t *dxr = dx + m * C;
        if (yr) {
#pragma omp simd
            for (int64_t c = 0; c < C; c++) {
                const real g = bn_wide(yr[c]) > 0 ? bn_wide(dyr[c]) : 0;
                const real v = k[c] * ((mr * g - rdb[c]) - bn_wide(hr[c]) * rdg[c]);
                dxr[c] = bn_round(acc == 0 ? v : acc * bn_wide(dxr[c]) + v);
            }
            continue;
        }
#pragma omp simd
        for (int64_t c = 0; c < C; c++) {
            const real v = k[c] * ((mr * bn_wide(dyr[c]) - rdb[c]) - bn_wide(hr[c]) * rdg[c]);
            dxr[c] = bn_round(acc == 0 ? v : acc * bn_wide(dxr[c]) + v);
        }
    }
}

#endif
