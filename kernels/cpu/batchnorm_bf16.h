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

/* The (M, C) arrays are read as runs of periods of P = cs_period(C) lanes (column_sums.h: P/C
 * whole rows, lane j holding channel j % C), so the inner loops run over whole vectors even
 * where C is short (LeNet-style 20 channels); a per-channel operand is repeated along a
 * period once a call, into `stack` (CS_PERIOD_MAX lanes) where the period fits it, else (P is
 * then C) into `spare` (C reals of the caller's work). */
static inline real *bn_lane_buffer(int64_t P, real *stack, real *spare)
{
    return P <= CS_PERIOD_MAX ? stack : spare;
}

static void bn_lanes_bf16(const uint16_t *v, int64_t C, int64_t P, real *lanes)
{
    for (int64_t j = 0; j < P; j++)
        lanes[j] = bn_wide(v[j % C]);
}

/* v itself where the period is one row (P == C), else v repeated along `stack`. */
static const real *bn_lanes_real(const real *v, int64_t C, int64_t P, real *stack)
{
    if (P == C)
        return v;
    for (int64_t j = 0; j < P; j++)
        stack[j] = v[j % C];
    return stack;
}

/* o1[c], o2[c] (C each) = the sums over the rows of (M, C) bf16 arrays, in double:
 * SHIFTED_SQUARES: of t = a - a[row 0] and t^2 (b unused); SUM_AND_DOT: of g and g * b, g = a
 * where mask (or NULL) > 0, else 0.  Block blk of cs_blocks(M, C) (rows) sums each lane of
 * its periods in double on the stack, folds the lanes in order into blocks + 2 C blk, and the
 * blocks are added in order: the same bits on any number of threads. */
static void bn_sums_bf16(int mode, const uint16_t *a, const uint16_t *b, const uint16_t *mask,
                         int64_t M, int64_t C, double *o1, double *o2, double *blocks,
                         real *spare)
{
    const int64_t nb = cs_blocks(M, C), P = cs_period(C), per = P / C;
    real stack[CS_PERIOD_MAX], *shift = bn_lane_buffer(P, stack, spare);
    if (mode == SHIFTED_SQUARES)
        bn_lanes_bf16(a, C, P, shift);
#pragma omp parallel for schedule(dynamic, 1) if (M * C >= NL_PARALLEL_MIN)
    for (int64_t blk = 0; blk < nb; blk++) {
        int64_t lo, hi;
        nl_split(M, blk, nb, &lo, &hi);
        double *s1 = blocks + blk * 2 * C, *s2 = s1 + C;
        /* a period longer than the stack's is one row: its lanes are the block's sums */
        double b1[CS_PERIOD_MAX], b2[CS_PERIOD_MAX];
        double *l1 = P <= CS_PERIOD_MAX ? b1 : s1, *l2 = P <= CS_PERIOD_MAX ? b2 : s2;
        for (int64_t j = 0; j < P; j++)
            l1[j] = l2[j] = 0;
        for (int64_t m = lo; m < hi; m += per) {
            const int64_t n = (hi - m < per ? hi - m : per) * C, o = m * C;
            const uint16_t *ar = a + o;
            if (mode == SHIFTED_SQUARES) {
#pragma omp simd
                for (int64_t j = 0; j < n; j++) {
                    const double t = (double)bn_wide(ar[j]) - (double)shift[j];
                    l1[j] += t;
                    l2[j] += t * t;
                }
                continue;
            }
            const uint16_t *br = b + o;
            if (mask) {
                const uint16_t *kr = mask + o;
#pragma omp simd
                for (int64_t j = 0; j < n; j++) {
                    /* the bits of a, or of +0 where the mask is not > 0, branch-free */
                    const uint16_t keep = (uint16_t)-(int)(bn_wide(kr[j]) > 0);
                    const double g = (double)bn_wide((uint16_t)(ar[j] & keep));
                    l1[j] += g;
                    l2[j] += g * (double)bn_wide(br[j]);
                }
                continue;
            }
#pragma omp simd
            for (int64_t j = 0; j < n; j++) {
                const double g = (double)bn_wide(ar[j]);
                l1[j] += g;
                l2[j] += g * (double)bn_wide(br[j]);
            }
        }
        for (int64_t c = 0; l1 != s1 && c < C; c++) {
            double a1 = 0, a2 = 0;
            for (int64_t r = 0; r < per; r++) {
                a1 += l1[r * C + c];
                a2 += l2[r * C + c];
            }
            s1[c] = a1;
            s2[c] = a2;
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
        bn_sums_bf16(SHIFTED_SQUARES, x, NULL, NULL, M, C, s1, s2, work_blocks(work, C), mu);
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
    /* elementwise: periods handed out about NL_GRAIN elements at a time */
    const int64_t P = cs_period(C), total = M * C, step = bn_periods_per_step(P) * P;
    /* the blocks' sums are spent: their 2 C doubles hold gamma's and beta's lanes if need be */
    real sm[CS_PERIOD_MAX], si[CS_PERIOD_MAX], sg[CS_PERIOD_MAX], sb[CS_PERIOD_MAX];
    real *spare = (real *)work_blocks(work, C);
    const real *lm = bn_lanes_real(mu, C, P, sm), *li = bn_lanes_real(inv, C, P, si);
    real *lg = bn_lane_buffer(P, sg, spare), *lb = bn_lane_buffer(P, sb, spare + C);
    bn_lanes_bf16(gamma, C, P, lg);
    bn_lanes_bf16(beta, C, P, lb);
#pragma omp parallel for schedule(dynamic, 1) if (total >= NL_PARALLEL_MIN)
    for (int64_t e0 = 0; e0 < total; e0 += step) {
        const int64_t e1 = e0 + step < total ? e0 + step : total;
        for (int64_t e = e0; e < e1; e += P) {
            const int64_t n = e1 - e < P ? e1 - e : P;
            const uint16_t *xr = x + e;
            uint16_t *yr = y + e, *hr = xhat + e;
#pragma omp simd
            for (int64_t j = 0; j < n; j++) {
                const real t = (bn_wide(xr[j]) - lm[j]) * li[j];
                const real v = t * lg[j] + lb[j];
                hr[j] = bn_round(t);
                yr[j] = bn_round(relu && v < 0 ? 0 : v);
            }
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
        bn_sums_bf16(SUM_AND_DOT, dy, xhat, relu_y, M, C, db, dg, work_blocks(work, C), NULL);
    }
    for (int64_t c = 0; c < C; c++) {
        dgamma[c] = bn_round(bn_wide(dgamma[c]) + (real)dg[c]);
        dbeta[c] = bn_round(bn_wide(dbeta[c]) + (real)db[c]);
        k[c] = (real)((double)bn_wide(gamma[c]) * (double)bn_wide(invstd[c]) / (double)M);
        rdb[c] = (real)db[c];
        rdg[c] = (real)dg[c];
    }
    const real mr = (real)M, acc = (real)beta_acc;
    /* elementwise: periods handed out about NL_GRAIN elements at a time */
    const int64_t P = cs_period(C), total = M * C, step = bn_periods_per_step(P) * P;
    real sk[CS_PERIOD_MAX], sdb[CS_PERIOD_MAX], sdg[CS_PERIOD_MAX];
    const real *lk = bn_lanes_real(k, C, P, sk), *ldb = bn_lanes_real(rdb, C, P, sdb);
    const real *ldg = bn_lanes_real(rdg, C, P, sdg);
#pragma omp parallel for schedule(dynamic, 1) if (total >= NL_PARALLEL_MIN)
    for (int64_t e0 = 0; e0 < total; e0 += step) {
        const int64_t e1 = e0 + step < total ? e0 + step : total;
        for (int64_t e = e0; e < e1; e += P) {
            const int64_t n = e1 - e < P ? e1 - e : P;
            const uint16_t *dyr = dy + e, *hr = xhat + e, *yr = relu_y ? relu_y + e : NULL;
            uint16_t *dxr = dx + e;
            if (yr) {
#pragma omp simd
                for (int64_t j = 0; j < n; j++) {
                    const uint16_t keep = (uint16_t)-(int)(bn_wide(yr[j]) > 0);
                    const real g = bn_wide((uint16_t)(dyr[j] & keep));
                    const real v = lk[j] * ((mr * g - ldb[j]) - bn_wide(hr[j]) * ldg[j]);
                    dxr[j] = bn_round(acc == 0 ? v : acc * bn_wide(dxr[j]) + v);
                }
                continue;
            }
#pragma omp simd
            for (int64_t j = 0; j < n; j++) {
                const real v = lk[j] * ((mr * bn_wide(dyr[j]) - ldb[j]) - bn_wide(hr[j]) * ldg[j]);
                dxr[j] = bn_round(acc == 0 ? v : acc * bn_wide(dxr[j]) + v);
            }
        }
    }
}

#endif
