/* GELU forward and backward, fused with a bias (see gelu.h).  The float erf and exp are the
 * vectorizable nl_erf32 and nl_expf of common.h; a row with a bias is one pass (the erf form)
 * or two short passes (bias, then the activation) over data that stays in L1. */
#include "no_fp_traps.h"
/* These loops are arithmetic-bound (erf and exp per element): full 512-bit vectors, where the
 * target has them, do about 1.5x the work per cycle of the default 256-bit ones.  (Before the
 * includes, so the inline math of common.h is compiled the same way.) */
#pragma GCC target("prefer-vector-width=512")
#include "bf16_bits.h"
#include "common.h"
#include "gelu.h"

#define SQRT_HALF ((real)0.70710678118654752440)
#define INV_SQRT_2PI ((real)0.39894228040143267794)
#define TANH_K ((real)0.79788456080286535588)
#define TANH_C ((real)0.044715)

/* The tanh form through e = exp(2z) and s = 1 / (e + 1): 1 + tanh(z) = 2 e s and
 * 1 - tanh(z)^2 = 4 e s^2, both with full relative accuracy in the tails (1 - t * t would
 * cancel).  2z is capped at 80 (tanh is 1 there in double too) so e stays finite. */
static inline void tanh_parts(real h, real *es, real *s)
{
    const real z = 2 * TANH_K * (h + TANH_C * h * h * h);
    const real e = NL_EXP(z < 80 ? z : (real)80), inv = 1 / (e + 1);
    *es = e * inv;
    *s = inv;
}

/* GELU of one pre-activation h: the erf form, and the tanh form through tanh_parts. */
static inline real gelu_erf(real h)
{
    return (real)0.5 * h * (1 + NL_ERF_REAL(h * SQRT_HALF));
}

static inline real gelu_tanh(real h)
{
    real es, s;
    tanh_parts(h, &es, &s);
    return h * es;
}

static void fprop_row(const real *x, const real *bias, real *pre, real *y, int64_t D,
                      int approximate)
{
    if (bias && !pre) { /* inference: x + bias is not kept */
        if (approximate) {
            for (int64_t d = 0; d < D; d++)
                y[d] = gelu_tanh(x[d] + bias[d]);
        } else {
            for (int64_t d = 0; d < D; d++)
                y[d] = gelu_erf(x[d] + bias[d]);
        }
        return;
    }
    if (bias && !approximate) { /* the sum kept for bprop, in the same pass */
        for (int64_t d = 0; d < D; d++) {
            const real h = x[d] + bias[d];
            pre[d] = h;
            y[d] = gelu_erf(h);
        }
        return;
    }
    if (bias) {
        for (int64_t d = 0; d < D; d++)
            pre[d] = x[d] + bias[d];
    } else if (pre && pre != x) {
        memcpy(pre, x, (size_t)D * sizeof(real));
    }
    const real *h = pre ? pre : x;
    if (approximate) {
        for (int64_t d = 0; d < D; d++)
            y[d] = gelu_tanh(h[d]);
    } else {
        for (int64_t d = 0; d < D; d++)
            y[d] = gelu_erf(h[d]);
    }
}

/* exp(-h^2 / 2), the Gaussian term of the erf-form slope: in float through nl_expf_normal
 * where the result is a normal float (the same values as nl_expf, which is 0 below). */
static inline float gauss_f32(float h)
{
    const float x = -0.5f * h * h;
    return x > -87.33654f ? nl_expf_normal(x) : 0.0f;
}

static inline double gauss_f64(double h)
{
    return exp(-0.5 * h * h);
}
#define NL_GAUSS(h) _Generic((h), float: gauss_f32, default: gauss_f64)(h)

/* dy times the slope gelu'(h): the tanh form; the erf form Phi(h) + h phi(h), with the
 * forward output y = h Phi(h) at hand (has_y) Phi is y / h (0.5 where h is 0 or below 1e-20 in
 * magnitude) and no erf is evaluated.  Inlined with constant flags into each row loop (the
 * float rows' and the bf16 rows'), so both compute the same bits. */
static inline __attribute__((always_inline)) real gelu_slope_times(real h, real y, real dy,
                                                                   const int approximate,
                                                                   const int has_y)
{
    if (approximate) {
        real es, s;
        tanh_parts(h, &es, &s);
        return dy * (es + 2 * h * es * s * TANH_K * (1 + 3 * TANH_C * h * h));
    }
    if (has_y) {
        const real a = h < 0 ? -h : h;
        const real cdf = a > (real)1e-20 ? y / (a > (real)1e-20 ? h : 1) : (real)0.5;
        return dy * (cdf + h * NL_GAUSS(h) * INV_SQRT_2PI);
    }
    return dy * ((real)0.5 * (1 + NL_ERF_REAL(h * SQRT_HALF)) + h * NL_GAUSS(h) * INV_SQRT_2PI);
}

static void bprop_row(const real *pre, const real *y, const real *dy, real *dx, int64_t D,
                      int approximate)
{
    if (approximate) {
        for (int64_t d = 0; d < D; d++)
            dx[d] = gelu_slope_times(pre[d], 0, dy[d], 1, 0);
    } else if (y) {
        for (int64_t d = 0; d < D; d++)
            dx[d] = gelu_slope_times(pre[d], y[d], dy[d], 0, 1);
    } else {
        for (int64_t d = 0; d < D; d++)
            dx[d] = gelu_slope_times(pre[d], 0, dy[d], 0, 0);
    }
}

void gelu_fprop(const real *x, const real *bias, real *pre, real *y, int64_t M, int64_t D,
                int approximate)
{
#pragma omp parallel for schedule(dynamic, nl_grain(D)) if (M * D >= NL_PARALLEL_MIN)
    for (int64_t m = 0; m < M; m++)
        fprop_row(x + m * D, bias, pre ? pre + m * D : NULL, y + m * D, D, approximate);
}

int64_t gelu_bprop_work_size(int64_t M, int64_t D)
{
    return nl_block_sums_size(M, D);
}

/* One row of a GELU backward pass: row m of dx written and, where `r` is given, its values
 * added to the row block's run sums r (D of them).  `args` is the pass's operands. */
typedef void (*bprop_row_fn)(const void *args, int64_t m, real *r);

/* Runs `row` on rows 0..M-1.  With `work` (nl_block_sums_size(M, D) doubles), also sums the
 * rows' dx per column: the rows are cut into nl_blocks(M) fixed blocks, each summed in runs
 * of NL_RUN rows into its own double slot (work + blk * D), so the sums have the same bits on
 * any number of threads; column_total adds the slots in block order. */
static void bprop_rows(bprop_row_fn row, const void *args, double *work, int64_t M, int64_t D)
{
    if (!work) {
#pragma omp parallel for schedule(dynamic, nl_grain(D)) if (M * D >= NL_PARALLEL_MIN)
        for (int64_t m = 0; m < M; m++)
            row(args, m, NULL);
        return;
    }
    const int64_t nb = nl_blocks(M);
    real *run = nl_block_sums_runs(work, M, D);
#pragma omp parallel for schedule(dynamic, 1) if (M * D >= NL_PARALLEL_MIN)
    for (int64_t blk = 0; blk < nb; blk++) {
        double *sum = work + (size_t)blk * (size_t)D;
        real *r = run + (size_t)blk * (size_t)D;
        int64_t lo, hi;
        nl_split(M, blk, nb, &lo, &hi);
        for (int64_t d = 0; d < D; d++)
            sum[d] = 0;
        for (int64_t m0 = lo; m0 < hi; m0 += NL_RUN) {
            const int64_t m1 = m0 + NL_RUN < hi ? m0 + NL_RUN : hi;
            for (int64_t d = 0; d < D; d++)
                r[d] = 0;
            for (int64_t m = m0; m < m1; m++)
                row(args, m, r);
            for (int64_t d = 0; d < D; d++)
                sum[d] += (double)r[d];
        }
    }
}

/* Column d's sum of the block slots bprop_rows left in `work`, in block order. */
static double column_total(const double *work, int64_t M, int64_t D, int64_t d)
{
    double total = 0;
    for (int64_t blk = 0; blk < nl_blocks(M); blk++)
        total += work[(size_t)blk * (size_t)D + d];
    return total;
}

/* The operands of gelu_bprop (float rows). */
struct bprop_args {
    const real *pre, *y, *dy;
    real *dx;
    int64_t D;
    int approximate;
};

static void bprop_row_summed(const void *args, int64_t m, real *r)
{
    const struct bprop_args *a = args;
    const int64_t D = a->D;
    real *dx = a->dx + m * D;
    bprop_row(a->pre + m * D, a->y ? a->y + m * D : NULL, a->dy + m * D, dx, D, a->approximate);
    if (r)
        for (int64_t d = 0; d < D; d++)
            r[d] += dx[d];
}

void gelu_bprop(const real *pre, const real *y, const real *dy, real *dx, real *dbias,
                double *work, int64_t M, int64_t D, int approximate)
{
    const struct bprop_args args = {pre, y, dy, dx, D, approximate};
    bprop_rows(bprop_row_summed, &args, dbias ? work : NULL, M, D);
    if (dbias)
        for (int64_t d = 0; d < D; d++)
            dbias[d] += (real)column_total(work, M, D, d);
}

/* One row of gelu_fprop_bf16 in one pass over its columns: each bf16 operand widened in
 * registers, the sum x + bias and the activation in `real`, the written values narrowed, so
 * no staging buffer sits between the conversions and the arithmetic.  The flags are constants
 * at every call (fprop_row_bf16 below), so each combination compiles to its own loop. */
static inline __attribute__((always_inline)) void fprop_bf16_pass(
    const uint16_t *x, const uint16_t *bias, uint16_t *pre, uint16_t *y, int64_t D,
    const int has_bias, const int keep, const int approximate)
{
#pragma omp simd
    for (int64_t d = 0; d < D; d++) {
        real h = (real)bf16_to_f32(x[d]);
        if (has_bias)
            h += (real)bf16_to_f32(bias[d]);
        if (keep)
            pre[d] = f32_to_bf16((float)h);
        y[d] = f32_to_bf16((float)(approximate ? gelu_tanh(h) : gelu_erf(h)));
    }
}

/* fprop_bf16_pass with its flags made constants one at a time (pre kept or not, a bias or
 * not, the form), so each of the eight cases is a loop of its own. */
static inline __attribute__((always_inline)) void fprop_bf16_kept(
    const uint16_t *x, const uint16_t *bias, uint16_t *pre, uint16_t *y, int64_t D,
    const int has_bias, const int approximate)
{
    if (pre)
        fprop_bf16_pass(x, bias, pre, y, D, has_bias, 1, approximate);
    else
        fprop_bf16_pass(x, bias, pre, y, D, has_bias, 0, approximate);
}

static inline __attribute__((always_inline)) void fprop_bf16_biased(
    const uint16_t *x, const uint16_t *bias, uint16_t *pre, uint16_t *y, int64_t D,
    const int approximate)
{
    if (bias)
        fprop_bf16_kept(x, bias, pre, y, D, 1, approximate);
    else
        fprop_bf16_kept(x, bias, pre, y, D, 0, approximate);
}

/* One row of gelu_fprop_bf16: pre (when kept) is the rounded x + bias, y is computed from the
 * unrounded sum. */
static void fprop_row_bf16(const uint16_t *x, const uint16_t *bias, uint16_t *pre, uint16_t *y,
                           int64_t D, int approximate)
{
    if (approximate)
        fprop_bf16_biased(x, bias, pre, y, D, 1);
    else
        fprop_bf16_biased(x, bias, pre, y, D, 0);
}

void gelu_fprop_bf16(const uint16_t *x, const uint16_t *bias, uint16_t *pre, uint16_t *y,
                     int64_t M, int64_t D, int approximate)
{
#pragma omp parallel for schedule(dynamic, nl_grain(D)) if (M * D >= NL_PARALLEL_MIN)
    for (int64_t m = 0; m < M; m++)
        fprop_row_bf16(x + m * D, bias, pre ? pre + m * D : NULL, y + m * D, D, approximate);
}

/* One row of gelu_bprop_bf16 in one pass (as fprop_bf16_pass): dx narrowed, its unrounded
 * values added to the row block's run sums r where `summed`. */
static inline __attribute__((always_inline)) void bprop_bf16_pass(
    const uint16_t *pre, const uint16_t *y, const uint16_t *dy, uint16_t *dx, real *r,
    int64_t D, const int approximate, const int has_y, const int summed)
{
#pragma omp simd
    for (int64_t d = 0; d < D; d++) {
        const real g = gelu_slope_times((real)bf16_to_f32(pre[d]),
                                        has_y ? (real)bf16_to_f32(y[d]) : 0,
                                        (real)bf16_to_f32(dy[d]), approximate, has_y);
        dx[d] = f32_to_bf16((float)g);
        if (summed)
            r[d] += g;
    }
}

/* bprop_bf16_pass with `summed` made a constant. */
static inline __attribute__((always_inline)) void bprop_bf16_summed(
    const uint16_t *pre, const uint16_t *y, const uint16_t *dy, uint16_t *dx, real *r,
    int64_t D, const int approximate, const int has_y)
{
    if (r)
        bprop_bf16_pass(pre, y, dy, dx, r, D, approximate, has_y, 1);
    else
        bprop_bf16_pass(pre, y, dy, dx, r, D, approximate, has_y, 0);
}

/* One row of gelu_bprop_bf16: dx narrowed; its unrounded values added to the row block's run
 * sums r when given (the tanh form ignores y). */
static void bprop_row_bf16(const uint16_t *pre, const uint16_t *y, const uint16_t *dy,
                           uint16_t *dx, real *r, int64_t D, int approximate)
{
    if (approximate)
        bprop_bf16_summed(pre, y, dy, dx, r, D, 1, 0);
    else if (y)
        bprop_bf16_summed(pre, y, dy, dx, r, D, 0, 1);
    else
        bprop_bf16_summed(pre, y, dy, dx, r, D, 0, 0);
}

/* The operands of gelu_bprop_bf16 (bf16 rows). */
struct bprop_bf16_args {
    const uint16_t *pre, *y, *dy;
    uint16_t *dx;
    int64_t D;
    int approximate;
};

static void bprop_row_bf16_summed(const void *args, int64_t m, real *r)
{
    const struct bprop_bf16_args *a = args;
    const int64_t D = a->D;
    bprop_row_bf16(a->pre + m * D, a->y ? a->y + m * D : NULL, a->dy + m * D, a->dx + m * D, r,
                   D, a->approximate);
}

void gelu_bprop_bf16(const uint16_t *pre, const uint16_t *y, const uint16_t *dy, uint16_t *dx,
                     uint16_t *dbias, double *work, int64_t M, int64_t D, int approximate)
{
    const struct bprop_bf16_args args = {pre, y, dy, dx, D, approximate};
    bprop_rows(bprop_row_bf16_summed, &args, dbias ? work : NULL, M, D);
    if (dbias)
        for (int64_t d = 0; d < D; d++)
            dbias[d] = f32_to_bf16((float)(bf16_to_f32(dbias[d])
                                           + (real)column_total(work, M, D, d)));
}

void erf_values(const real *x, real *y, int64_t n)
{
#pragma omp parallel for schedule(static) if (n >= NL_PARALLEL_MIN)
    for (int64_t i = 0; i < n; i++)
        y[i] = NL_ERF_REAL(x[i]);
}
