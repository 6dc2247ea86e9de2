/* im2col / col2im for NHWC convolution (see conv.h). */
#include "common.h"
#include "conv.h"

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

void im2col(const real *x, real *cols, const conv_geom *g, int64_t n0, int64_t n1)
{
    const int64_t H = g->H, W = g->W, C = g->C, P = g->P, Q = g->Q, R = g->R, S = g->S;
    const int64_t row_len = R * S * C, nrows = (n1 - n0) * P;
    const size_t cbytes = (size_t)C * sizeof(real);
#pragma omp parallel for schedule(dynamic, nl_grain(Q * row_len)) \
    if (nrows * Q * row_len >= NL_PARALLEL_MIN)
    for (int64_t np = 0; np < nrows; np++) {
        const int64_t n = n0 + np / P, p = np % P;
        const real *img = x + n * H * W * C;
        for (int64_t q = 0; q < Q; q++) {
            real *dst = cols + (np * Q + q) * row_len;
            const int64_t w0 = q * g->str_w - g->pad_w;
            int64_t s_lo, s_hi;
            valid_taps(w0, S, g->dil_w, W, &s_lo, &s_hi);
            for (int64_t r = 0; r < R; r++) {
                const int64_t h = p * g->str_h - g->pad_h + r * g->dil_h;
                real *d = dst + r * S * C;
                if (h < 0 || h >= H || s_lo == s_hi) {
                    memset(d, 0, (size_t)S * cbytes);
                    continue;
                }
                const real *src = img + h * W * C;
                memset(d, 0, (size_t)s_lo * cbytes);
                if (g->dil_w == 1) {
                    memcpy(d + s_lo * C, src + (w0 + s_lo) * C, (size_t)(s_hi - s_lo) * cbytes);
                } else {
                    for (int64_t s = s_lo; s < s_hi; s++)
                        memcpy(d + s * C, src + (w0 + s * g->dil_w) * C, cbytes);
                }
                memset(d + s_hi * C, 0, (size_t)(S - s_hi) * cbytes);
            }
        }
    }
}

/* Every input row (n, h) is owned by one thread, which gathers the patch entries that fall on
 * it: no two threads write the same element, so no atomics are needed. */
void col2im(const real *cols, real *dx, const conv_geom *g, int64_t n0, int64_t n1, real beta)
{
    const int64_t H = g->H, W = g->W, C = g->C, P = g->P, Q = g->Q, R = g->R, S = g->S;
    const int64_t row_len = R * S * C, nrows = (n1 - n0) * H;
#pragma omp parallel for schedule(dynamic, nl_grain(W * C * R)) \
    if (nrows * W * C * R >= NL_PARALLEL_MIN)
    for (int64_t nh = 0; nh < nrows; nh++) {
        const int64_t n = n0 + nh / H, h = nh % H;
        const real *img_cols = cols + (nh / H) * P * Q * row_len;
        real *out = dx + (n * H + h) * W * C;
        nl_scale(out, W * C, beta);
        for (int64_t r = 0; r < R; r++) {
            const int64_t t = h + g->pad_h - r * g->dil_h;
            if (t < 0 || t % g->str_h != 0)
                continue;
            const int64_t p = t / g->str_h;
            if (p >= P)
                continue;
            for (int64_t q = 0; q < Q; q++) {
                const int64_t w0 = q * g->str_w - g->pad_w;
                int64_t s_lo, s_hi;
                valid_taps(w0, S, g->dil_w, W, &s_lo, &s_hi);
                const real *src = img_cols + (p * Q + q) * row_len + r * S * C;
                if (g->dil_w == 1) {
                    real *d = out + (w0 + s_lo) * C;
                    const real *s = src + s_lo * C;
                    const int64_t len = (s_hi - s_lo) * C;
                    for (int64_t i = 0; i < len; i++)
                        d[i] += s[i];
                } else {
                    for (int64_t s = s_lo; s < s_hi; s++) {
                        real *d = out + (w0 + s * g->dil_w) * C;
                        const real *e = src + s * C;
                        for (int64_t c = 0; c < C; c++)
                            d[c] += e[c];
                    }
                }
            }
        }
    }
}
