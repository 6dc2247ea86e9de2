/* The patches of a convolution on NHWC images (conv_geom.h): which filter taps land inside
 * an input row, a patch row's gathering (im2col's row) and its scatter-add (col2im's), for the
 * tiled passes of conv.c and of bf16/conv_compute.c.  Included by those sources; not a cffi
 * header.
 *
 * The including source defines, before it includes this file, the element type of a gathered
 * patch `conv_patch_t`, the source of a gather `conv_source` (a struct) and
 *     static inline void conv_patch_load(const conv_source *src, int64_t at,
 *                                        conv_patch_t *dst, int64_t n)
 * which writes elements [at, at + n) of the source's image data into dst[0, n). */
#ifndef NEONLITE_CONV_PATCHES_H
#define NEONLITE_CONV_PATCHES_H

#include "conv_geom.h"

/* The taps s in [*lo, *hi) of a filter row starting at input column w0 that land inside
 * [0, W) when taps are `dil` apart. */
static inline void valid_taps(int64_t w0, int64_t S, int64_t dil, int64_t W,
                              int64_t *lo, int64_t *hi)
{
    int64_t a = w0 >= 0 ? 0 : (-w0 + dil - 1) / dil;
    int64_t b = w0 >= W ? 0 : (W - 1 - w0) / dil + 1;
    if (a > S)
        a = S;
    if (b > S)
        b = S;
    if (b < a)
        b = a;
    *lo = a;
    *hi = b;
}

/* Input row `row` (W, C) += the taps s_lo <= s < s_hi of one filter row of a patch, `taps`
 * (S, C), whose first tap sits at input column w0. */
static inline void add_taps(real *row, const real *taps, const conv_geom *g, int64_t w0,
                            int64_t s_lo, int64_t s_hi)
{
    const int64_t C = g->C;
    if (g->dil_w == 1) {
        real *d = row + (w0 + s_lo) * C;
        const real *v = taps + s_lo * C;
        const int64_t len = (s_hi - s_lo) * C;
        for (int64_t i = 0; i < len; i++)
            d[i] += v[i];
        return;
    }
    for (int64_t s = s_lo; s < s_hi; s++) {
        real *d = row + (w0 + s * g->dil_w) * C;
        const real *v = taps + s * C;
        for (int64_t c = 0; c < C; c++)
            d[c] += v[c];
    }
}

/* dst (Q, R*S*C) = the patches of output row p of image n of the source (conv_patch_load
 * copies, or widens, a run of it into conv_patch_t elements; zeros where a tap falls in the
 * padding). */
static void gather_row(const conv_source *src, conv_patch_t *dst, const conv_geom *g,
                       int64_t n, int64_t p)
{
    const int64_t H = g->H, W = g->W, C = g->C, Q = g->Q, R = g->R, S = g->S;
    const int64_t row_len = R * S * C;
    const size_t cbytes = (size_t)C * sizeof(conv_patch_t);
    const int64_t img = n * H * W * C;
    for (int64_t q = 0; q < Q; q++, dst += row_len) {
        const int64_t w0 = q * g->str_w - g->pad_w;
        int64_t s_lo, s_hi;
        valid_taps(w0, S, g->dil_w, W, &s_lo, &s_hi);
        for (int64_t r = 0; r < R; r++) {
            const int64_t h = p * g->str_h - g->pad_h + r * g->dil_h;
            conv_patch_t *d = dst + r * S * C;
            if (h < 0 || h >= H || s_lo == s_hi) {
                memset(d, 0, (size_t)S * cbytes);
                continue;
            }
            const int64_t at = img + h * W * C;
            memset(d, 0, (size_t)s_lo * cbytes);
            if (g->dil_w == 1) {
                conv_patch_load(src, at + (w0 + s_lo) * C, d + s_lo * C, (s_hi - s_lo) * C);
            } else {
                for (int64_t s = s_lo; s < s_hi; s++)
                    conv_patch_load(src, at + (w0 + s * g->dil_w) * C, d + s * C, C);
            }
            memset(d + s_hi * C, 0, (size_t)(S - s_hi) * cbytes);
        }
    }
}

/* dst = the patches of output rows [r0, r1) of the batch (row np = image np / P, row np % P),
 * Q patch rows of R*S*C each, in order. */
static void gather_rows(const conv_source *src, conv_patch_t *dst, const conv_geom *g,
                        int64_t r0, int64_t r1)
{
    const int64_t per_row = g->Q * g->R * g->S * g->C;
    for (int64_t np = r0; np < r1; np++)
        gather_row(src, dst + (np - r0) * per_row, g, np / g->P, np % g->P);
}

/* Image n of dx += the Q patch rows of output row p in src (Q, R*S*C) (padding dropped). */
static void scatter_row(const real *src, real *dx, const conv_geom *g, int64_t n, int64_t p)
{
    const int64_t H = g->H, W = g->W, C = g->C, Q = g->Q, R = g->R, S = g->S;
    const int64_t row_len = R * S * C;
    real *img = dx + n * H * W * C;
    for (int64_t q = 0; q < Q; q++, src += row_len) {
        const int64_t w0 = q * g->str_w - g->pad_w;
        int64_t s_lo, s_hi;
        valid_taps(w0, S, g->dil_w, W, &s_lo, &s_hi);
        for (int64_t r = 0; r < R; r++) {
            const int64_t h = p * g->str_h - g->pad_h + r * g->dil_h;
            if (h < 0 || h >= H)
                continue;
            add_taps(img + h * W * C, src + r * S * C, g, w0, s_lo, s_hi);
        }
    }
}

#endif
