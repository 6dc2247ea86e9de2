/* GELU forward and backward, fused with a bias (see gelu.h).  The float erf and exp are the
 * vectorizable nl_erf32 and nl_expf of common.h; a row with a bias is one pass (the erf form)
 * or two short passes (bias, then the activation) over data that stays in L1. */
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

/* Rows summed in `real` before their sums enter the double block totals (as in norm.c). */
#define RUN 32

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

/* The erf-form slope Phi(h) + h phi(h); with the forward output y = h Phi(h) at hand, Phi is
 * y / h (0.5 where h is 0 or below 1e-20 in magnitude) and no erf is evaluated. */
static void bprop_row(const real *pre, const real *y, const real *dy, real *dx, int64_t D,
                      int approximate)
{
    if (approximate) {
        for (int64_t d = 0; d < D; d++) {
            const real h = pre[d];
            real es, s;
            tanh_parts(h, &es, &s);
            dx[d] = dy[d] * (es + 2 * h * es * s * TANH_K * (1 + 3 * TANH_C * h * h));
        }
    } else if (y) {
        for (int64_t d = 0; d < D; d++) {
            const real h = pre[d], a = h < 0 ? -h : h;
            const real cdf = a > (real)1e-20 ? y[d] / (a > (real)1e-20 ? h : 1) : (real)0.5;
            dx[d] = dy[d] * (cdf + h * NL_GAUSS(h) * INV_SQRT_2PI);
        }
    } else {
        for (int64_t d = 0; d < D; d++) {
            const real h = pre[d];
            dx[d] = dy[d] * ((real)0.5 * (1 + NL_ERF_REAL(h * SQRT_HALF))
                             + h * NL_GAUSS(h) * INV_SQRT_2PI);
        }
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

void gelu_bprop(const real *pre, const real *y, const real *dy, real *dx, real *dbias,
                double *work, int64_t M, int64_t D, int approximate)
{
    if (!dbias) {
#pragma omp parallel for schedule(dynamic, nl_grain(D)) if (M * D >= NL_PARALLEL_MIN)
        for (int64_t m = 0; m < M; m++)
            bprop_row(pre + m * D, y ? y + m * D : NULL, dy + m * D, dx + m * D, D, approximate);
        return;
    }
    const int64_t nb = nl_blocks(M);
    double *part = work;
    real *run = nl_block_sums_runs(work, M, D);
#pragma omp parallel for schedule(dynamic, 1) if (M * D >= NL_PARALLEL_MIN)
    for (int64_t blk = 0; blk < nb; blk++) {
        double *sum = part + (size_t)blk * (size_t)D;
        real *r = run + (size_t)blk * (size_t)D;
        int64_t lo, hi;
        nl_split(M, blk, nb, &lo, &hi);
        for (int64_t d = 0; d < D; d++)
            sum[d] = 0;
        for (int64_t m0 = lo; m0 < hi; m0 += RUN) {
            const int64_t m1 = m0 + RUN < hi ? m0 + RUN : hi;
            for (int64_t d = 0; d < D; d++)
                r[d] = 0;
            for (int64_t m = m0; m < m1; m++) {
                real *dxr = dx + m * D;
                bprop_row(pre + m * D, y ? y + m * D : NULL, dy + m * D, dxr, D, approximate);
                for (int64_t d = 0; d < D; d++)
                    r[d] += dxr[d];
            }
            for (int64_t d = 0; d < D; d++)
                sum[d] += (double)r[d];
        }
    }
    for (int64_t d = 0; d < D; d++) {
        double total = 0;
        for (int64_t blk = 0; blk < nb; blk++)
            total += part[(size_t)blk * (size_t)D + d];
        dbias[d] += (real)total;
    }
}

/* Columns of a bf16 row staged in `real` at a time (stack buffers, in L1). */
#define BF16_CHUNK 256

static inline void widen_chunk(const uint16_t *bits, real *out, int64_t n)
{
    for (int64_t k = 0; k < n; k++)
        out[k] = (real)bf16_to_f32(bits[k]);
}

static inline void narrow_chunk(const real *in, uint16_t *bits, int64_t n)
{
    for (int64_t k = 0; k < n; k++)
        bits[k] = f32_to_bf16((float)in[k]);
}

/* One row of gelu_fprop_bf16: chunks of the row (and of the bias) widened, fprop_row on
 * them, narrowed. */
static void fprop_row_bf16(const uint16_t *x, const uint16_t *bias, uint16_t *pre, uint16_t *y,
                           int64_t D, int approximate)
{
    real xs[BF16_CHUNK], bs[BF16_CHUNK], hs[BF16_CHUNK], ys[BF16_CHUNK];
    for (int64_t d0 = 0; d0 < D; d0 += BF16_CHUNK) {
        const int64_t n = D - d0 < BF16_CHUNK ? D - d0 : BF16_CHUNK;
        widen_chunk(x + d0, xs, n);
        if (bias)
            widen_chunk(bias + d0, bs, n);
        fprop_row(xs, bias ? bs : NULL, pre ? hs : NULL, ys, n, approximate);
        if (pre)
            narrow_chunk(hs, pre + d0, n);
        narrow_chunk(ys, y + d0, n);
    }
}

void gelu_fprop_bf16(const uint16_t *x, const uint16_t *bias, uint16_t *pre, uint16_t *y,
                     int64_t M, int64_t D, int approximate)
{
#pragma omp parallel for schedule(dynamic, nl_grain(D)) if (M * D >= NL_PARALLEL_MIN)
    for (int64_t m = 0; m < M; m++)
        fprop_row_bf16(x + m * D, bias, pre ? pre + m * D : NULL, y + m * D, D, approximate);
}

/* One row of gelu_bprop_bf16: chunks widened, bprop_row on them, dx narrowed; its unrounded
 * values added to the row block's run sums r when given. */
static void bprop_row_bf16(const uint16_t *pre, const uint16_t *y, const uint16_t *dy,
                           uint16_t *dx, real *r, int64_t D, int approximate)
{
    real hs[BF16_CHUNK], ys[BF16_CHUNK], dys[BF16_CHUNK], dxs[BF16_CHUNK];
    for (int64_t d0 = 0; d0 < D; d0 += BF16_CHUNK) {
        const int64_t n = D - d0 < BF16_CHUNK ? D - d0 : BF16_CHUNK;
        widen_chunk(pre + d0, hs, n);
        widen_chunk(dy + d0, dys, n);
        if (y)
            widen_chunk(y + d0, ys, n);
        bprop_row(hs, y ? ys : NULL, dys, dxs, n, approximate);
        narrow_chunk(dxs, dx + d0, n);
        if (r)
            for (int64_t k = 0; k < n; k++)
                r[d0 + k] += dxs[k];
    }
}

void gelu_bprop_bf16(const uint16_t *pre, const uint16_t *y, const uint16_t *dy, uint16_t *dx,
                     uint16_t *dbias, double *work, int64_t M, int64_t D, int approximate)
{
    if (!dbias) {
#pragma omp parallel for schedule(dynamic, nl_grain(D)) if (M * D >= NL_PARALLEL_MIN)
        for (int64_t m = 0; m < M; m++)
            bprop_row_bf16(pre + m * D, y ? y + m * D : NULL, dy + m * D, dx + m * D, NULL, D,
                           approximate);
        return;
    }
    const int64_t nb = nl_blocks(M);
    double *part = work;
    real *run = nl_block_sums_runs(work, M, D);
#pragma omp parallel for schedule(dynamic, 1) if (M * D >= NL_PARALLEL_MIN)
    for (int64_t blk = 0; blk < nb; blk++) {
        double *sum = part + (size_t)blk * (size_t)D;
        real *r = run + (size_t)blk * (size_t)D;
        int64_t lo, hi;
        nl_split(M, blk, nb, &lo, &hi);
        for (int64_t d = 0; d < D; d++)
            sum[d] = 0;
        for (int64_t m0 = lo; m0 < hi; m0 += RUN) {
            const int64_t m1 = m0 + RUN < hi ? m0 + RUN : hi;
            for (int64_t d = 0; d < D; d++)
                r[d] = 0;
            for (int64_t m = m0; m < m1; m++)
                bprop_row_bf16(pre + m * D, y ? y + m * D : NULL, dy + m * D, dx + m * D, r, D,
                               approximate);
            for (int64_t d = 0; d < D; d++)
                sum[d] += (double)r[d];
        }
    }
    for (int64_t d = 0; d < D; d++) {
        double total = 0;
        for (int64_t blk = 0; blk < nb; blk++)
            total += part[(size_t)blk * (size_t)D + d];
        dbias[d] = f32_to_bf16((float)(bf16_to_f32(dbias[d]) + (real)total));
    }
}

void erf_values(const real *x, real *y, int64_t n)
{
#pragma omp parallel for schedule(static) if (n >= NL_PARALLEL_MIN)
    for (int64_t i = 0; i < n; i++)
        y[i] = NL_ERF_REAL(x[i]);
}
