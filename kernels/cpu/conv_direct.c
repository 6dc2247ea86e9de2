/* Direct convolution on NHWC images (see conv_direct.h): register-blocked loops, no patches. */
#include <omp.h>

#include "common.h"
#include "conv_bf16_rows.h"
#include "conv_direct.h"
#include "conv_update_blocks.h"

/* A vector of real numbers as wide as one vector register of the target (AVX-512: 64 bytes,
 * 32 registers; otherwise 32 bytes and 16 registers, as AVX2 has); `uvec` may sit at any
 * address aligned to a real. */
#ifdef __AVX512F__
#define NL_VBYTES 64
#define NL_VREGS 32
#else
#define NL_VBYTES 32
#define NL_VREGS 16
#endif
#define VL ((int64_t)(NL_VBYTES / sizeof(real)))
typedef real vec __attribute__((vector_size(NL_VBYTES)));
typedef real uvec __attribute__((vector_size(NL_VBYTES), aligned(sizeof(real))));

/* Output pixels per register block for KV vectors of output channels: QB * KV accumulators
 * plus KV filter vectors and a broadcast stay within the vector registers (at most 14). */
#define QB_RAW(KV) ((NL_VREGS - (KV) - 1) / (KV))
#define QB_FOR(KV) (QB_RAW(KV) > 14 ? 14 : QB_RAW(KV))

/* Image `at` (its first element's index) of x (H, W, C), or of the bf16 bits xb when x is
 * NULL, put into the middle of xp (H + 2*pad_h, W + 2*pad_w, C); the border is zero. */
static void pad_image(const real *x, const uint16_t *xb, int64_t at, real *xp, int64_t H,
                      int64_t W, int64_t C, int64_t pad_h, int64_t pad_w)
{
    const int64_t Wp = W + 2 * pad_w, Hp = H + 2 * pad_h;
    if (pad_h == 0 && pad_w == 0) {
        conv_widen(x, xb, at, xp, H * W * C);
        return;
    }
    memset(xp, 0, (size_t)(pad_h * Wp * C) * sizeof(real));
    memset(xp + (pad_h + H) * Wp * C, 0, (size_t)((Hp - pad_h - H) * Wp * C) * sizeof(real));
    for (int64_t h = 0; h < H; h++) {
        real *row = xp + (h + pad_h) * Wp * C;
        memset(row, 0, (size_t)(pad_w * C) * sizeof(real));
        conv_widen(x, xb, at + h * W * C, row + pad_w * C, W * C);
        memset(row + (pad_w + W) * C, 0, (size_t)(pad_w * C) * sizeof(real));
    }
}

/* out[i][kv] (qb pixels, qb <= QB, KV vectors of channels) = beta * out + the sum over the
 * filter taps of xp at the pixels' windows times f.  `xq` points at the first pixel's window
 * origin in the padded image, pixels `xs` elements apart; `f` at the block's first channel. */
static inline __attribute__((always_inline)) void block(
    const real *xq, int64_t xs, const real *f, real *out, const conv_geom *g, real beta,
    const int qb, const int KV)
{
    const int64_t C = g->C, K = g->K, S = g->S, Wp = g->W + 2 * g->pad_w;
    vec acc[14][4];
    for (int i = 0; i < qb; i++)
        for (int j = 0; j < KV; j++)
            acc[i][j] = (vec){0};
    for (int64_t r = 0; r < g->R; r++) {
        for (int64_t s = 0; s < S; s++) {
            const real *xt = xq + (r * g->dil_h * Wp + s * g->dil_w) * C;
            const real *ft = f + (r * S + s) * C * K;
            for (int64_t c = 0; c < C; c++) {
                vec fv[4];
                for (int j = 0; j < KV; j++)
                    fv[j] = *(const uvec *)(ft + c * K + j * VL);
                for (int i = 0; i < qb; i++) {
                    const real b = xt[i * xs + c];
                    for (int j = 0; j < KV; j++)
                        acc[i][j] += b * fv[j];
                }
            }
        }
    }
    for (int i = 0; i < qb; i++)
        for (int j = 0; j < KV; j++) {
            uvec *o = (uvec *)(out + i * K + j * VL);
            *o = beta == 0 ? acc[i][j] : beta * *o + acc[i][j];
        }
}

/* CALL(n, KV) with the compile-time constant n = size, for 1 <= size <= QB_FOR(KV) (a block
 * size known to the compiler keeps the accumulators in registers). */
#define SIZE_CASE(N, KV, CALL)                                                                  \
    case N:                                                                                     \
        if ((N) <= QB_FOR(KV))                                                                  \
            CALL(N, KV);                                                                        \
        break;
#define DISPATCH(SIZE, KV, CALL)                                                                \
    switch (SIZE) {                                                                             \
        SIZE_CASE(1, KV, CALL) SIZE_CASE(2, KV, CALL) SIZE_CASE(3, KV, CALL)                    \
        SIZE_CASE(4, KV, CALL) SIZE_CASE(5, KV, CALL) SIZE_CASE(6, KV, CALL)                    \
        SIZE_CASE(7, KV, CALL) SIZE_CASE(8, KV, CALL) SIZE_CASE(9, KV, CALL)                    \
        SIZE_CASE(10, KV, CALL) SIZE_CASE(11, KV, CALL) SIZE_CASE(12, KV, CALL)                 \
        SIZE_CASE(13, KV, CALL) SIZE_CASE(14, KV, CALL)                                         \
    default: break;                                                                             \
    }

/* Block i of n items cut into the fewest blocks of at most qb, sizes differing by at most one
 * (14 pixels in blocks of at most 6: 5, 5, 4, never 6, 6, 1 and 1): [*lo, *lo + *len). */
static inline void balanced_block(int64_t n, int64_t qb, int64_t i, int64_t *lo, int64_t *len)
{
    const int64_t nb = (n + qb - 1) / qb;
    int64_t hi;
    nl_split(n, i, nb, lo, &hi);
    *len = hi - *lo;
}

/* One output row of one image, KV vectors of channels at a time. */
#define ROW_VARIANT(KV)                                                                         \
    static void row_kv##KV(const real *xrow, const real *f, real *out, const conv_geom *g,  \
                           real beta)                                                           \
    {                                                                                           \
        const int64_t xs = g->str_w * g->C, Q = g->Q, K = g->K;                                 \
        const int64_t nb = (Q + QB_FOR(KV) - 1) / QB_FOR(KV);                                   \
        for (int64_t k0 = 0; k0 < K; k0 += KV * VL)                                             \
            for (int64_t b = 0; b < nb; b++) {                                                  \
                int64_t q, len;                                                                 \
                balanced_block(Q, QB_FOR(KV), b, &q, &len);                                     \
                DISPATCH(len, KV, ROW_BLOCK)                                                    \
            }                                                                                   \
    }
#define ROW_BLOCK(n, kv) block(xrow + q * xs, xs, f + k0, out + q * K + k0, g, beta, n, kv)
ROW_VARIANT(1)
ROW_VARIANT(2)
ROW_VARIANT(3)
ROW_VARIANT(4)
#undef ROW_BLOCK

int conv_direct_width(void)
{
    return (int)VL;
}

/* Output rows are handed out in units of one image's rows [p0, p1): whole images when there
 * are at least two per thread, else each image cut into enough parts for every thread.  A
 * thread pads an image into its slice of work when it first takes a unit of that image. */
static int64_t parts_per_image(const conv_geom *g, int64_t nwork)
{
    const int64_t want = g->N >= 2 * nwork ? 1 : (2 * nwork + g->N - 1) / g->N;
    return want < g->P ? want : g->P;
}

/* The widest of 4, 3, 2, 1 vectors of output channels that divides K's vectors. */
static int vectors_per_block(int64_t K)
{
    const int64_t kv = K / VL;
    return kv % 4 == 0 ? 4 : kv % 3 == 0 ? 3 : kv % 2 == 0 ? 2 : 1;
}

/* conv_direct on x (real) or, where x is NULL, the bf16 bits xb, into o (real) or, where o is
 * NULL, the bf16 bits ob: an output row of ob is computed into the thread's Q*K staging
 * (after its padded image in work), its epilogue run there, then rounded into ob once. */
static void direct_pass(const real *x, const uint16_t *xb, const real *f, real *o, uint16_t *ob,
                        const conv_geom *g, real *work, int64_t nwork, real beta,
                        const real *bias, int relu)
{
    const int KV = vectors_per_block(g->K);
    const int64_t Hp = g->H + 2 * g->pad_h, Wp = g->W + 2 * g->pad_w;
    const int64_t image = g->H * g->W * g->C, out_image = g->P * g->Q * g->K;
    const int64_t parts = parts_per_image(g, nwork);
    /* a bf16 pass's parts on cache lines (conv_lines); the float pass's slices as they were */
    const int64_t padded = ob ? conv_lines(Hp * Wp * g->C) : Hp * Wp * g->C;
    const int64_t slice = padded + (ob ? conv_lines(g->Q * g->K) : 0);
#pragma omp parallel num_threads(nwork)
    {
        real *xp = work + (int64_t)omp_get_thread_num() * slice;
        real *staged = xp + padded;
        int64_t padded = -1;
#pragma omp for schedule(dynamic, 1)
        for (int64_t u = 0; u < g->N * parts; u++) {
            const int64_t n = u / parts;
            int64_t p0, p1;
            nl_split(g->P, u % parts, parts, &p0, &p1);
            if (n != padded) {
                pad_image(x, xb, n * image, xp, g->H, g->W, g->C, g->pad_h, g->pad_w);
                padded = n;
            }
            for (int64_t p = p0; p < p1; p++) {
                const real *xrow = xp + p * g->str_h * Wp * g->C;
                const int64_t at = n * out_image + p * g->Q * g->K;
                real *out = ob ? staged : o + at;
                const real b = ob ? 0 : beta;
                switch (KV) {
                case 4: row_kv4(xrow, f, out, g, b); break;
                case 3: row_kv3(xrow, f, out, g, b); break;
                case 2: row_kv2(xrow, f, out, g, b); break;
                default: row_kv1(xrow, f, out, g, b); break;
                }
                nl_bias_relu(out, g->Q, g->K, bias, relu);
                if (ob)
                    conv_narrow(out, ob + at, g->Q * g->K, beta);
            }
        }
    }
}

void conv_direct(const real *x, const real *f, real *o, const conv_geom *g, real *work,
                 int64_t nwork, real beta, const real *bias, int relu)
{
    direct_pass(x, NULL, f, o, NULL, g, work, nwork, beta, bias, relu);
}

int64_t conv_direct_bf16_work_size(const conv_geom *g, int64_t nwork)
{
    const int64_t padded = conv_lines((g->H + 2 * g->pad_h) * (g->W + 2 * g->pad_w) * g->C);
    const int64_t update = padded + conv_lines(g->P * g->Q * g->K);
    const int64_t fprop = padded + conv_lines(g->Q * g->K);
    return conv_filter_head(g) + nwork * (update > fprop ? update : fprop);
}

void conv_direct_bf16(const uint16_t *x, const uint16_t *f, uint16_t *o, const conv_geom *g,
                      real *work, int64_t nwork, real beta, const uint16_t *bias, int relu)
{
    const int64_t fsize = g->R * g->S * g->C * g->K;
    real *fw = work, *bw = work + conv_lines(fsize);
    /* on the calling thread: a filter is small, and a second parallel region would cost a
     * wake-up of every thread */
    conv_widen(NULL, f, 0, fw, fsize);
    if (bias)
        conv_widen(NULL, bias, 0, bw, g->K);
    direct_pass(NULL, x, fw, NULL, o, g, work + conv_filter_head(g), nwork, beta, bias ? bw : NULL,
                relu);
}

/* acc (jb filter rows x KV vectors of output channels, jb <= QB) of df += the sum over the
 * pixels of output rows [p0, p1) of one image of the jb input values at xj (one filter row's
 * consecutive taps and channels) times e's channels.  xj at pixel (0, 0), pixels xs_q
 * (columns) and xs_p (rows) elements apart; e at the block's first channel; df at the
 * block's first row. */
static inline __attribute__((always_inline)) void ublock(
    const real *xj, int64_t xs_q, int64_t xs_p, const real *e, real *df, const conv_geom *g,
    int64_t p0, int64_t p1, const int jb, const int KV)
{
    const int64_t K = g->K;
    vec acc[14][4];
    for (int i = 0; i < jb; i++)
        for (int j = 0; j < KV; j++)
            acc[i][j] = *(const uvec *)(df + i * K + j * VL);
    for (int64_t p = p0; p < p1; p++) {
        const real *xrow = xj + p * xs_p;
        const real *erow = e + p * g->Q * K;
        for (int64_t q = 0; q < g->Q; q++) {
            const real *xv = xrow + q * xs_q;
            vec ev[4];
            for (int j = 0; j < KV; j++)
                ev[j] = *(const uvec *)(erow + q * K + j * VL);
            for (int i = 0; i < jb; i++) {
                const real b = xv[i];
                for (int j = 0; j < KV; j++)
                    acc[i][j] += b * ev[j];
            }
        }
    }
    for (int i = 0; i < jb; i++)
        for (int j = 0; j < KV; j++)
            *(uvec *)(df + i * K + j * VL) = acc[i][j];
}

/* df (R*S*C, K) += the weight gradient of output rows [p0, p1) of one padded image xp and its
 * output gradient e. */
#define UPDATE_VARIANT(KV)                                                                      \
    static void update_kv##KV(const real *xp, const real *e, real *df, const conv_geom *g,   \
                              int64_t p0, int64_t p1)                                           \
    {                                                                                           \
        const int64_t C = g->C, S = g->S, K = g->K, Wp = g->W + 2 * g->pad_w;                   \
        const int64_t xs_q = g->str_w * C, xs_p = g->str_h * Wp * C;                            \
        const int64_t nseg = g->dil_w == 1 ? 1 : S, len = g->dil_w == 1 ? S * C : C;            \
        for (int64_t r = 0; r < g->R; r++)                                                      \
            for (int64_t seg = 0; seg < nseg; seg++) {                                          \
                const real *xs = xp + r * g->dil_h * Wp * C + seg * g->dil_w * C;               \
                real *rows = df + (r * S * C + seg * C) * K;                                    \
                for (int64_t k0 = 0; k0 < K; k0 += KV * VL)                                     \
                    for (int64_t b = 0; b < (len + QB_FOR(KV) - 1) / QB_FOR(KV); b++) {         \
                        int64_t j, jb;                                                          \
                        balanced_block(len, QB_FOR(KV), b, &j, &jb);                            \
                        DISPATCH(jb, KV, UPDATE_BLOCK)                                          \
                    }                                                                           \
            }                                                                                   \
    }
#define UPDATE_BLOCK(n, kv) \
    ublock(xs + j, xs_q, xs_p, e + k0, rows + j * K + k0, g, p0, p1, n, kv)
UPDATE_VARIANT(1)
UPDATE_VARIANT(2)
UPDATE_VARIANT(3)
UPDATE_VARIANT(4)
#undef UPDATE_BLOCK

/* conv_direct_update on x and e (real) or, where they are NULL, the bf16 bits xb and eb
 * (the rows of e a block takes widened into the thread's P*Q*K staging after its padded
 * image), into df (real) or, where df is NULL, the bf16 bits dfb (the partials summed in
 * double and rounded once). */
static void update_pass(const real *x, const uint16_t *xb, const real *e, const uint16_t *eb,
                        real *df, uint16_t *dfb, const conv_geom *g, real *work,
                        real *partials, int64_t nwork, real beta)
{
    const int KV = vectors_per_block(g->K);
    const int64_t Hp = g->H + 2 * g->pad_h, Wp = g->W + 2 * g->pad_w;
    const int64_t image = g->H * g->W * g->C, out_image = g->P * g->Q * g->K;
    const int64_t size = g->R * g->S * g->C * g->K, row = g->Q * g->K;
    const int64_t rows = g->N * g->P, nblk = conv_update_block_count(g);
    const int64_t padded = eb ? conv_lines(Hp * Wp * g->C) : Hp * Wp * g->C;
    const int64_t slice = padded + (eb ? conv_lines(out_image) : 0);
#pragma omp parallel num_threads(nwork)
    {
        const int64_t me = omp_get_thread_num(), nth = omp_get_num_threads();
        real *xp = work + me * slice, *staged = xp + padded;
#pragma omp for schedule(dynamic, 1)
        for (int64_t b = 0; b < nblk; b++) {
            real *part = partials + b * size;
            int64_t r0, r1;
            nl_split(rows, b, nblk, &r0, &r1);
            memset(part, 0, (size_t)size * sizeof(real));
            while (r0 < r1) {
                const int64_t n = r0 / g->P, p0 = r0 % g->P;
                const int64_t p1 = r1 - n * g->P < g->P ? r1 - n * g->P : g->P;
                pad_image(x, xb, n * image, xp, g->H, g->W, g->C, g->pad_h, g->pad_w);
                const real *en = e ? e + n * out_image : staged;
                if (!e)
                    conv_widen(NULL, eb, n * out_image + p0 * row, staged + p0 * row,
                            (p1 - p0) * row);
                switch (KV) {
                case 4: update_kv4(xp, en, part, g, p0, p1); break;
                case 3: update_kv3(xp, en, part, g, p0, p1); break;
                case 2: update_kv2(xp, en, part, g, p0, p1); break;
                default: update_kv1(xp, en, part, g, p0, p1); break;
                }
                r0 = n * g->P + p1;
            }
        }
        int64_t i0, i1;
        nl_split(size, me, nth, &i0, &i1);
        if (df)
            conv_update_sum(df, partials, nblk, size, i0, i1, beta);
        else
            conv_update_sum_bf16(dfb, partials, nblk, size, i0, i1, beta);
    }
}

void conv_direct_update(const real *x, const real *e, real *df, const conv_geom *g,
                        real *work, real *partials, int64_t nwork, real beta)
{
    update_pass(x, NULL, e, NULL, df, NULL, g, work, partials, nwork, beta);
}

void conv_direct_update_bf16(const uint16_t *x, const uint16_t *e, uint16_t *df,
                             const conv_geom *g, real *work, real *partials, int64_t nwork,
                             real beta)
{
    update_pass(NULL, x, NULL, e, NULL, df, g, work, partials, nwork, beta);
}
