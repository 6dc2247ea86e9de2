/* Max / average pooling, forward and backward (see pool.h). */
#include <omp.h>

#include "bf16_bits.h"
#include "common.h"
#include "pool.h"

/* Channels of a bf16 average summed at a time (a stack buffer of `real`s). */
#define POOL_BF16_CHUNK 256

/* The unpadded input rows [*lo, *hi) covered by window row p (and likewise for columns). */
static inline void window(int64_t p, int64_t stride, int64_t pad, int64_t R, int64_t H,
                          int64_t *lo, int64_t *hi)
{
    const int64_t start = p * stride - pad;
    *lo = start < 0 ? 0 : start;
    *hi = start + R > H ? H : start + R;
}

void maxpool_fprop(const real *x, real *y, int32_t *argmax, const pool_geom *g)
{
    const int64_t H = g->H, W = g->W, C = g->C, P = g->P, Q = g->Q;
    const int64_t nrows = g->N * P;
#pragma omp parallel for schedule(dynamic, nl_grain(Q * C * g->R * g->S)) \
    if (nrows * Q * C * g->R * g->S >= NL_PARALLEL_MIN)
    for (int64_t np = 0; np < nrows; np++) {
        const int64_t n = np / P, p = np % P;
        int64_t h_lo, h_hi;
        window(p, g->str_h, g->pad_h, g->R, H, &h_lo, &h_hi);
        const real *img = x + n * H * W * C;
        for (int64_t q = 0; q < Q; q++) {
            int64_t w_lo, w_hi;
            window(q, g->str_w, g->pad_w, g->S, W, &w_lo, &w_hi);
            real *out = y + (np * Q + q) * C;
            int32_t *arg = argmax + (np * Q + q) * C;
            int first = 1;
            for (int64_t h = h_lo; h < h_hi; h++) {
                for (int64_t w = w_lo; w < w_hi; w++) {
                    const real *v = img + (h * W + w) * C;
                    const int32_t pos = (int32_t)(h * W + w);
                    if (first) {
                        for (int64_t c = 0; c < C; c++) {
                            out[c] = v[c];
                            arg[c] = pos;
                        }
                        first = 0;
                        continue;
                    }
                    for (int64_t c = 0; c < C; c++) {
                        const int better = v[c] > out[c];
                        out[c] = better ? v[c] : out[c];
                        arg[c] = better ? pos : arg[c];
                    }
                }
            }
        }
    }
}

/* The backward passes scatter-add into dx in units that never write the same element: one
 * image, or, when windows do not overlap vertically (str_h >= R), one window row of an image.
 * Unit u covers image *n and window rows [*p0, *p1). */
static inline int64_t scatter_units(const pool_geom *g)
{
    return g->str_h >= g->R ? g->N * g->P : g->N;
}

static inline void scatter_unit(const pool_geom *g, int64_t u, int64_t *n, int64_t *p0,
                                int64_t *p1)
{
    if (g->str_h >= g->R) {
        *n = u / g->P;
        *p0 = u % g->P;
        *p1 = *p0 + 1;
    } else {
        *n = u;
        *p0 = 0;
        *p1 = g->P;
    }
}

static void scale_all(real *dx, const pool_geom *g, real beta)
{
    const int64_t image = g->H * g->W * g->C;
#pragma omp parallel for schedule(dynamic, nl_grain(image)) if (g->N * image >= NL_PARALLEL_MIN)
    for (int64_t n = 0; n < g->N; n++)
        nl_scale(dx + n * image, image, beta);
}

/* When windows do not overlap (str_h >= R and str_w >= S) every input element lies in at most
 * one window, so the backward passes gather instead: each input row is written once, by the
 * thread that owns it, with no zeroing pass first.  owner() is the window covering input
 * coordinate h along one axis, or -1. */
static inline int disjoint(const pool_geom *g)
{
    return g->str_h >= g->R && g->str_w >= g->S;
}

static inline int64_t owner(int64_t h, int64_t stride, int64_t pad, int64_t R, int64_t P)
{
    const int64_t t = h + pad, p = t / stride;
    return (p < P && t - p * stride < R) ? p : -1;
}

/* d[c] = beta * d[c] + v[c] for C elements (beta == 0 overwrites); v == NULL adds zero. */
static inline void put(real *d, const real *v, real scale, const int32_t *arg, int32_t pos,
                       int64_t C, real beta)
{
    if (v == NULL) {
        nl_scale(d, C, beta);
    } else if (beta == 0) {
        if (arg)
            for (int64_t c = 0; c < C; c++)
                d[c] = arg[c] == pos ? v[c] : 0;
        else
            for (int64_t c = 0; c < C; c++)
                d[c] = v[c] * scale;
    } else {
        if (arg)
            for (int64_t c = 0; c < C; c++)
                d[c] = beta * d[c] + (arg[c] == pos ? v[c] : 0);
        else
            for (int64_t c = 0; c < C; c++)
                d[c] = beta * d[c] + v[c] * scale;
    }
}

/* put() or put_bf16() on an element type's rows, as the disjoint backward pass calls it */
typedef void (*put_row)(void *d, const void *v, real scale, const int32_t *arg, int32_t pos,
                        int64_t C, real beta);

static void put_real(void *d, const void *v, real scale, const int32_t *arg, int32_t pos,
                     int64_t C, real beta)
{
    put((real *)d, (const real *)v, scale, arg, pos, C, beta);
}

/* The gathering backward pass for disjoint windows on elements of `size` bytes (`real`, or
 * bf16 bits), each dx row written by `put_fn`; argmax == NULL means average pooling. */
static void bprop_disjoint(const void *e, const int32_t *argmax, void *dx, const pool_geom *g,
                           real beta, size_t size, put_row put_fn)
{
    const int64_t H = g->H, W = g->W, C = g->C, P = g->P, Q = g->Q;
#pragma omp parallel for schedule(dynamic, nl_grain(W * C)) \
    if (g->N * H * W * C >= NL_PARALLEL_MIN)
    for (int64_t nh = 0; nh < g->N * H; nh++) {
        const int64_t n = nh / H, h = nh % H;
        const int64_t p = owner(h, g->str_h, g->pad_h, g->R, P);
        char *row = (char *)dx + nh * W * C * (int64_t)size;
        int64_t h_lo = 0, h_hi = 0;
        if (p >= 0)
            window(p, g->str_h, g->pad_h, g->R, H, &h_lo, &h_hi);
        for (int64_t w = 0; w < W; w++) {
            const int64_t q = p < 0 ? -1 : owner(w, g->str_w, g->pad_w, g->S, Q);
            if (q < 0) {
                put_fn(row + w * C * (int64_t)size, NULL, 0, NULL, 0, C, beta);
                continue;
            }
            const int64_t o = ((n * P + p) * Q + q) * C;
            int64_t w_lo, w_hi;
            window(q, g->str_w, g->pad_w, g->S, W, &w_lo, &w_hi);
            const real scale = (real)(1.0 / (double)((h_hi - h_lo) * (w_hi - w_lo)));
            put_fn(row + w * C * (int64_t)size, (const char *)e + o * (int64_t)size, scale,
                   argmax ? argmax + o : NULL, (int32_t)(h * W + w), C, beta);
        }
    }
}

void maxpool_bprop(const real *e, const int32_t *argmax, real *dx, const pool_geom *g,
                   real beta)
{
    if (disjoint(g)) {
        bprop_disjoint(e, argmax, dx, g, beta, sizeof(real), put_real);
        return;
    }
    const int64_t C = g->C, Q = g->Q, units = scatter_units(g);
    scale_all(dx, g, beta);
#pragma omp parallel for schedule(dynamic, nl_grain(g->N * g->P * Q * C / units)) \
    if (g->N * g->P * Q * C >= NL_PARALLEL_MIN)
    for (int64_t u = 0; u < units; u++) {
        int64_t n, p0, p1;
        scatter_unit(g, u, &n, &p0, &p1);
        real *img = dx + n * g->H * g->W * C;
        const int64_t o0 = (n * g->P + p0) * Q * C, o1 = (n * g->P + p1) * Q * C;
        for (int64_t o = o0; o < o1; o += C)
            for (int64_t c = 0; c < C; c++)
                img[(int64_t)argmax[o + c] * C + c] += e[o + c];
    }
}

void avgpool_fprop(const real *x, real *y, const pool_geom *g)
{
    const int64_t H = g->H, W = g->W, C = g->C, P = g->P, Q = g->Q;
    const int64_t nrows = g->N * P;
#pragma omp parallel for schedule(dynamic, nl_grain(Q * C * g->R * g->S)) \
    if (nrows * Q * C * g->R * g->S >= NL_PARALLEL_MIN)
    for (int64_t np = 0; np < nrows; np++) {
        const int64_t n = np / P, p = np % P;
        int64_t h_lo, h_hi;
        window(p, g->str_h, g->pad_h, g->R, H, &h_lo, &h_hi);
        const real *img = x + n * H * W * C;
        for (int64_t q = 0; q < Q; q++) {
            int64_t w_lo, w_hi;
            window(q, g->str_w, g->pad_w, g->S, W, &w_lo, &w_hi);
            real *out = y + (np * Q + q) * C;
            for (int64_t c = 0; c < C; c++)
                out[c] = 0;
            for (int64_t h = h_lo; h < h_hi; h++)
                for (int64_t w = w_lo; w < w_hi; w++) {
                    const real *v = img + (h * W + w) * C;
                    for (int64_t c = 0; c < C; c++)
                        out[c] += v[c];
                }
            const real inv = (real)(1.0 / (double)((h_hi - h_lo) * (w_hi - w_lo)));
            for (int64_t c = 0; c < C; c++)
                out[c] *= inv;
        }
    }
}

void avgpool_bprop(const real *e, real *dx, const pool_geom *g, real beta)
{
    if (disjoint(g)) {
        bprop_disjoint(e, NULL, dx, g, beta, sizeof(real), put_real);
        return;
    }
    const int64_t H = g->H, W = g->W, C = g->C, Q = g->Q, units = scatter_units(g);
    scale_all(dx, g, beta);
#pragma omp parallel for schedule(dynamic, nl_grain(g->N * g->P * Q * C * g->R * g->S / units)) \
    if (g->N * g->P * Q * C * g->R * g->S >= NL_PARALLEL_MIN)
    for (int64_t u = 0; u < units; u++) {
        int64_t n, p0, p1;
        scatter_unit(g, u, &n, &p0, &p1);
        real *img = dx + n * H * W * C;
        for (int64_t p = p0; p < p1; p++) {
            int64_t h_lo, h_hi;
            window(p, g->str_h, g->pad_h, g->R, H, &h_lo, &h_hi);
            for (int64_t q = 0; q < Q; q++) {
                int64_t w_lo, w_hi;
                window(q, g->str_w, g->pad_w, g->S, W, &w_lo, &w_hi);
                const real *err = e + ((n * g->P + p) * Q + q) * C;
                const real inv = (real)(1.0 / (double)((h_hi - h_lo) * (w_hi - w_lo)));
                for (int64_t h = h_lo; h < h_hi; h++)
                    for (int64_t w = w_lo; w < w_hi; w++) {
                        real *d = img + (h * W + w) * C;
                        for (int64_t c = 0; c < C; c++)
                            d[c] += err[c] * inv;
                    }
            }
        }
    }
}

/* ---- bfloat16 operands (see pool.h): widened while read, float32 sums, rounded once. ---- */

void maxpool_fprop_bf16(const uint16_t *x, uint16_t *y, int32_t *argmax, const pool_geom *g)
{
    const int64_t H = g->H, W = g->W, C = g->C, P = g->P, Q = g->Q;
    const int64_t nrows = g->N * P;
#pragma omp parallel for schedule(dynamic, nl_grain(Q * C * g->R * g->S)) \
    if (nrows * Q * C * g->R * g->S >= NL_PARALLEL_MIN)
    for (int64_t np = 0; np < nrows; np++) {
        const int64_t n = np / P, p = np % P;
        int64_t h_lo, h_hi;
        window(p, g->str_h, g->pad_h, g->R, H, &h_lo, &h_hi);
        const uint16_t *img = x + n * H * W * C;
        /* the running max widened (32-bit lanes, as the argmax's), its winner's bits written
         * back at the end: a widened bf16 value rounds to itself (a NaN to the quiet NaN, as
         * narrowing the float pass's output does) */
        real best[POOL_BF16_CHUNK];
        for (int64_t q = 0; q < Q; q++) {
            int64_t w_lo, w_hi;
            window(q, g->str_w, g->pad_w, g->S, W, &w_lo, &w_hi);
            for (int64_t c0 = 0; c0 < C; c0 += POOL_BF16_CHUNK) {
                const int64_t nc = C - c0 < POOL_BF16_CHUNK ? C - c0 : POOL_BF16_CHUNK;
                int32_t *arg = argmax + (np * Q + q) * C + c0;
                int first = 1;
                for (int64_t h = h_lo; h < h_hi; h++) {
                    for (int64_t w = w_lo; w < w_hi; w++) {
                        const uint16_t *v = img + (h * W + w) * C + c0;
                        const int32_t pos = (int32_t)(h * W + w);
                        if (first) {
                            for (int64_t c = 0; c < nc; c++) {
                                best[c] = (real)bf16_to_f32(v[c]);
                                arg[c] = pos;
                            }
                            first = 0;
                            continue;
                        }
                        for (int64_t c = 0; c < nc; c++) {
                            const real t = (real)bf16_to_f32(v[c]);
                            const int better = t > best[c];
                            best[c] = better ? t : best[c];
                            arg[c] = better ? pos : arg[c];
                        }
                    }
                }
                uint16_t *out = y + (np * Q + q) * C + c0;
                for (int64_t c = 0; c < nc; c++)
                    out[c] = f32_to_bf16((float)best[c]);
            }
        }
    }
}

void avgpool_fprop_bf16(const uint16_t *x, uint16_t *y, const pool_geom *g)
{
    const int64_t H = g->H, W = g->W, C = g->C, P = g->P, Q = g->Q;
    const int64_t nrows = g->N * P;
#pragma omp parallel for schedule(dynamic, nl_grain(Q * C * g->R * g->S)) \
    if (nrows * Q * C * g->R * g->S >= NL_PARALLEL_MIN)
    for (int64_t np = 0; np < nrows; np++) {
        const int64_t n = np / P, p = np % P;
        int64_t h_lo, h_hi;
        window(p, g->str_h, g->pad_h, g->R, H, &h_lo, &h_hi);
        const uint16_t *img = x + n * H * W * C;
        real acc[POOL_BF16_CHUNK];
        for (int64_t q = 0; q < Q; q++) {
            int64_t w_lo, w_hi;
            window(q, g->str_w, g->pad_w, g->S, W, &w_lo, &w_hi);
            const real inv = (real)(1.0 / (double)((h_hi - h_lo) * (w_hi - w_lo)));
            for (int64_t c0 = 0; c0 < C; c0 += POOL_BF16_CHUNK) {
                const int64_t nc = C - c0 < POOL_BF16_CHUNK ? C - c0 : POOL_BF16_CHUNK;
                for (int64_t c = 0; c < nc; c++)
                    acc[c] = 0;
                for (int64_t h = h_lo; h < h_hi; h++)
                    for (int64_t w = w_lo; w < w_hi; w++) {
                        const uint16_t *v = img + (h * W + w) * C + c0;
                        for (int64_t c = 0; c < nc; c++)
                            acc[c] += (real)bf16_to_f32(v[c]);
                    }
                uint16_t *out = y + (np * Q + q) * C + c0;
                for (int64_t c = 0; c < nc; c++)
                    out[c] = f32_to_bf16((float)(acc[c] * inv));
            }
        }
    }
}

/* d[c] = round(beta * d[c] + t[c]) for C bf16 elements, t[c] = v[c] * scale, or with arg,
 * v[c] where arg[c] == pos and 0 elsewhere; v == NULL adds zero.  beta == 0 overwrites (a
 * routed max gradient is then its bits, exactly, a NaN's payload kept). */
static inline void put_bf16(uint16_t *d, const uint16_t *v, real scale, const int32_t *arg,
                            int32_t pos, int64_t C, real beta)
{
    if (v == NULL) {
        for (int64_t c = 0; c < C; c++)
            d[c] = beta == 0 ? 0 : f32_to_bf16((float)(beta * (real)bf16_to_f32(d[c])));
    } else if (arg && beta == 0) {
        for (int64_t c = 0; c < C; c++)
            d[c] = arg[c] == pos ? v[c] : 0;
    } else if (arg) {
        for (int64_t c = 0; c < C; c++) {
            const real t = arg[c] == pos ? (real)bf16_to_f32(v[c]) : 0;
            d[c] = f32_to_bf16((float)(beta * (real)bf16_to_f32(d[c]) + t));
        }
    } else if (beta == 0) {
        for (int64_t c = 0; c < C; c++)
            d[c] = f32_to_bf16((float)((real)bf16_to_f32(v[c]) * scale));
    } else {
        for (int64_t c = 0; c < C; c++)
            d[c] = f32_to_bf16((float)(beta * (real)bf16_to_f32(d[c])
                                       + (real)bf16_to_f32(v[c]) * scale));
    }
}

static void put_bits(void *d, const void *v, real scale, const int32_t *arg, int32_t pos,
                     int64_t C, real beta)
{
    put_bf16((uint16_t *)d, (const uint16_t *)v, scale, arg, pos, C, beta);
}

/* The backward pass of overlapping windows on bf16 operands (argmax == NULL: average): one
 * image per thread at a time, staged in float32 (beta * dx widened, or zero), every window's
 * gradient added there, then rounded into dx once. */
static void bprop_overlapping_bf16(const uint16_t *e, const int32_t *argmax, uint16_t *dx,
                                   const pool_geom *g, real beta, real *work, int64_t nwork)
{
    const int64_t H = g->H, W = g->W, C = g->C, P = g->P, Q = g->Q, image = H * W * C;
#pragma omp parallel num_threads(nwork) if (g->N * image >= NL_PARALLEL_MIN)
    {
        real *stage = work + (int64_t)omp_get_thread_num() * image;
#pragma omp for schedule(dynamic, 1)
        for (int64_t n = 0; n < g->N; n++) {
            uint16_t *img = dx + n * image;
            for (int64_t i = 0; i < image; i++)
                stage[i] = beta == 0 ? 0 : beta * (real)bf16_to_f32(img[i]);
            for (int64_t p = 0; p < P; p++) {
                int64_t h_lo, h_hi;
                window(p, g->str_h, g->pad_h, g->R, H, &h_lo, &h_hi);
                for (int64_t q = 0; q < Q; q++) {
                    const int64_t o = ((n * P + p) * Q + q) * C;
                    if (argmax) {
                        for (int64_t c = 0; c < C; c++)
                            stage[(int64_t)argmax[o + c] * C + c] += (real)bf16_to_f32(e[o + c]);
                        continue;
                    }
                    int64_t w_lo, w_hi;
                    window(q, g->str_w, g->pad_w, g->S, W, &w_lo, &w_hi);
                    const real inv = (real)(1.0 / (double)((h_hi - h_lo) * (w_hi - w_lo)));
                    for (int64_t h = h_lo; h < h_hi; h++)
                        for (int64_t w = w_lo; w < w_hi; w++) {
                            real *d = stage + (h * W + w) * C;
                            for (int64_t c = 0; c < C; c++)
                                d[c] += (real)bf16_to_f32(e[o + c]) * inv;
                        }
                }
            }
            for (int64_t i = 0; i < image; i++)
                img[i] = f32_to_bf16((float)stage[i]);
        }
    }
}

int pool_bf16_overlapping(const pool_geom *g)
{
    return !disjoint(g);
}

int pool_threads(void)
{
    return omp_get_max_threads();
}

void maxpool_bprop_bf16(const uint16_t *e, const int32_t *argmax, uint16_t *dx,
                        const pool_geom *g, real beta, real *work, int64_t nwork)
{
    if (disjoint(g))
        bprop_disjoint(e, argmax, dx, g, beta, sizeof(uint16_t), put_bits);
    else
        bprop_overlapping_bf16(e, argmax, dx, g, beta, work, nwork);
}

void avgpool_bprop_bf16(const uint16_t *e, uint16_t *dx, const pool_geom *g, real beta,
                        real *work, int64_t nwork)
{
    if (disjoint(g))
        bprop_disjoint(e, NULL, dx, g, beta, sizeof(uint16_t), put_bits);
    else
        bprop_overlapping_bf16(e, NULL, dx, g, beta, work, nwork);
}
