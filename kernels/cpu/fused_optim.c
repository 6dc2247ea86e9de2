/* The parameter arena's fused optimizer step (see fused_optim.h).
 *
 * No floating-point contraction: a * b + c must round the product like the op-tree machine,
 * which stores every operation's result, does. */
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif
#include <omp.h>

#include "bf16_bits.h"
#include "bf16_stochastic.h"
#include "common.h"
#include "fused_optim.h"

#define NL_MAX(x, y) (((x) >= (y) || (x) != (x)) ? (x) : (y))
#define NL_MIN(x, y) (((x) <= (y) || (x) != (x)) ? (x) : (y))

/* The gradient element i after scaling, clipping and coupled decay; *d: the decayed weight. */
#define NL_GRAD_AND_DECAY()                                                                     \
    real gi = g[i];                                                                             \
    if (scaled)                                                                                 \
        gi = gi * scale;                                                                        \
    if (clipped) {                                                                              \
        gi = NL_MAX(gi, lo);                                                                    \
        gi = NL_MIN(gi, hi);                                                                    \
    }                                                                                           \
    const real wi = w[i];                                                                       \
    const real d = decay ? wi * decay_mul : wi;                                                 \
    if (coupled)                                                                                \
        gi = gi + wdecay * d

/* Applies the rule to elements [0, n) of w, g and the states (pointers to a run's first
 * element; a state the rule does not use may be NULL). */
static void update_run(const nl_fused_rule *rule, int64_t flags, int64_t n, real *w,
                       const real *g, real *s0, real *s1, uint16_t *h0, uint16_t *h1)
{
    const int scaled = (rule->flags & NL_FUSED_SCALED) != 0;
    const int clipped = (rule->flags & NL_FUSED_CLIPPED) != 0;
    const int decay = (flags & NL_SEG_DECAY) != 0, coupled = (flags & NL_SEG_WDECAY) != 0;
    const real scale = (real)rule->scale, lo = (real)rule->clip_low, hi = (real)rule->clip_high;
    const real decay_mul = (real)rule->decay_mul, wdecay = (real)rule->wdecay;
    const real c0 = (real)rule->c[0], c1 = (real)rule->c[1], c2 = (real)rule->c[2],
               c3 = (real)rule->c[3], c4 = (real)rule->c[4], c5 = (real)rule->c[5],
               c6 = (real)rule->c[6];
    switch (rule->rule) {
    case NL_RULE_SGD:
        for (int64_t i = 0; i < n; i++) {
            NL_GRAD_AND_DECAY();
            w[i] = d - c0 * gi;
        }
        break;
    case NL_RULE_MOMENTUM:
        for (int64_t i = 0; i < n; i++) {
            NL_GRAD_AND_DECAY();
            const real v = c1 * s0[i] - c0 * gi;
            s0[i] = v;
            w[i] = d + v;
        }
        break;
    case NL_RULE_NESTEROV:
        for (int64_t i = 0; i < n; i++) {
            NL_GRAD_AND_DECAY();
            const real v = c1 * s0[i] - c0 * gi;
            s0[i] = v;
            w[i] = (d + c1 * v) - c0 * gi;
        }
        break;
    case NL_RULE_ADAM:
        for (int64_t i = 0; i < n; i++) {
            NL_GRAD_AND_DECAY();
            const real m = c0 * s0[i] + c1 * gi;
            const real v = c2 * s1[i] + c3 * (gi * gi);
            s0[i] = m;
            s1[i] = v;
            w[i] = d - (c4 * m) / (sqrt(v) * c5 + c6);
        }
        break;
    case NL_RULE_ADAM_BF16:
        for (int64_t i = 0; i < n; i++) {
            NL_GRAD_AND_DECAY();
            const uint16_t mb = f32_to_bf16((float)(c0 * (real)bf16_to_f32(h0[i]) + c1 * gi));
            const uint16_t vb = f32_to_bf16((float)(c2 * (real)bf16_to_f32(h1[i])
                                                    + c3 * (gi * gi)));
            h0[i] = mb;
            h1[i] = vb;
            const real m = (real)bf16_to_f32(mb), v = (real)bf16_to_f32(vb);
            w[i] = d - (c4 * m) / (sqrt(v) * c5 + c6);
        }
        break;
    case NL_RULE_RMSPROP:
        for (int64_t i = 0; i < n; i++) {
            NL_GRAD_AND_DECAY();
            const real s = c1 * s0[i] + c2 * (gi * gi);
            s0[i] = s;
            w[i] = d - (c0 * gi) / (sqrt(s) + c3);
        }
        break;
    case NL_RULE_ADAGRAD:
        for (int64_t i = 0; i < n; i++) {
            NL_GRAD_AND_DECAY();
            const real s = s0[i] + gi * gi;
            s0[i] = s;
            w[i] = d - (c0 * gi) / (sqrt(s) + c1);
        }
        break;
    default:
        break;
    }
}

/* Integer views of `real` elements (may_alias: they read what the update stored as floats). */
typedef uint32_t __attribute__((may_alias)) bits32;
typedef uint64_t __attribute__((may_alias)) bits64;
typedef uint16_t __attribute__((may_alias)) bits16;

/* 1 when none of x[0 .. n) is NaN or +/-inf: no element's exponent bits are all ones (an
 * integer test the compiler vectorizes). */
static int finite_run(const real *x, int64_t n)
{
    int bad = 0;
    if (sizeof(real) == 4) {
        const bits32 *u = (const bits32 *)x;
        for (int64_t i = 0; i < n; i++)
            bad |= (u[i] & 0x7F800000u) == 0x7F800000u;
    } else {
        const bits64 *u = (const bits64 *)x;
        for (int64_t i = 0; i < n; i++)
            bad |= (u[i] & 0x7FF0000000000000ull) == 0x7FF0000000000000ull;
    }
    return !bad;
}

static int finite_bf16_run(const uint16_t *h, int64_t n)
{
    int bad = 0;
    for (int64_t i = 0; i < n; i++)
        bad |= (h[i] & 0x7F80u) == 0x7F80u;
    return !bad;
}

/* Elements checked at a time: the values a block of the update wrote are read again while
 * they are in L1. */
#define CHECK_BLOCK 2048

/* p + offset, or NULL for a state the rule does not use. */
#define NL_AT(p, offset) ((p) ? (p) + (offset) : NULL)

/* 1 when every value the rule wrote to elements [a, a + n) (weights and its states) is
 * finite, else 0. */
static int written_finite(const nl_fused_rule *rule, int64_t a, int64_t n, const real *w,
                          const real *s0, const real *s1, const uint16_t *h0,
                          const uint16_t *h1)
{
    int ok = finite_run(w + a, n);
    if (rule->rule == NL_RULE_ADAM_BF16) {
        ok &= finite_bf16_run(h0 + a, n) & finite_bf16_run(h1 + a, n);
    } else {
        if (rule->rule != NL_RULE_SGD)
            ok &= finite_run(s0 + a, n);
        if (rule->rule == NL_RULE_ADAM)
            ok &= finite_run(s1 + a, n);
    }
    return ok;
}

/* Updates elements [lo_i, hi_i) block by block; returns 1 when every value written (weights
 * and the rule's states) is finite, else 0. */
static int update_segment(const nl_fused_rule *rule, int64_t flags, int64_t lo_i, int64_t hi_i,
                          real *w, const real *g, real *s0, real *s1, uint16_t *h0,
                          uint16_t *h1)
{
    int ok = 1;
    for (int64_t a = lo_i; a < hi_i; a += CHECK_BLOCK) {
        const int64_t n = a + CHECK_BLOCK < hi_i ? CHECK_BLOCK : hi_i - a;
        update_run(rule, flags, n, w + a, g + a, NL_AT(s0, a), NL_AT(s1, a), NL_AT(h0, a),
                   NL_AT(h1, a));
        ok &= written_finite(rule, a, n, w, s0, s1, h0, h1);
    }
    return ok;
}

int fused_update(const nl_fused_rule *rule, const nl_segment *segs, int64_t nseg, real *w,
                 const real *g, real *s0, real *s1, uint16_t *h0, uint16_t *h1)
{
    if (rule->rule < NL_RULE_SGD || rule->rule > NL_RULE_ADAGRAD)
        return -1;
    int64_t total = 0;
    int ok = 1;
    for (int64_t k = 0; k < nseg; k++)
        total += segs[k].size;
#pragma omp parallel reduction(& : ok) if (total >= NL_PARALLEL_MIN)
    {
        const int64_t nthreads = omp_get_num_threads(), me = omp_get_thread_num();
        int64_t lo, hi;
        nl_split(total, me, nthreads, &lo, &hi);
        /* This thread's elements [lo, hi) of the concatenated segments. */
        int64_t start = 0;
        for (int64_t k = 0; k < nseg && start < hi; k++) {
            const int64_t end = start + segs[k].size;
            const int64_t a = lo > start ? lo : start, b = hi < end ? hi : end;
            if (a < b) {
                const int64_t base = segs[k].offset - start;
                ok &= update_segment(rule, segs[k].flags, base + a, base + b, w, g, s0, s1,
                                     h0, h1);
            }
            start = end;
        }
    }
    return ok ? 0 : 1;
}

/* Sums of squares keep this many double accumulators (element i goes to lane i mod LANES, the
   lanes are added pairwise at the end): independent chains the compiler turns into vector
   FMAs, where one running sum would wait on each add's latency.  The order is fixed by the
   segment alone, so the result does not depend on the thread count. */
#define SUMSQ_LANES 16

#define NL_SUM_SQUARES(name, type, load)                                                        \
    static double name(const type *x, int64_t n)                                                \
    {                                                                                           \
        double acc[SUMSQ_LANES] = {0};                                                          \
        int64_t i = 0;                                                                          \
        for (; i + SUMSQ_LANES <= n; i += SUMSQ_LANES)                                          \
            for (int l = 0; l < SUMSQ_LANES; l++) {                                             \
                const double v = load(x[i + l]);                                                \
                acc[l] += v * v;                                                                \
            }                                                                                   \
        for (int l = 0; i < n; i++, l++) {                                                      \
            const double v = load(x[i]);                                                        \
            acc[l] += v * v;                                                                    \
        }                                                                                       \
        for (int width = SUMSQ_LANES / 2; width > 0; width /= 2)                                \
            for (int l = 0; l < width; l++)                                                     \
                acc[l] += acc[l + width];                                                       \
        return acc[0];                                                                          \
    }

#define NL_LOAD_REAL(x) ((double)(x))
#define NL_LOAD_BF16(x) ((double)bf16_to_f32(x))
NL_SUM_SQUARES(sum_squares, real, NL_LOAD_REAL)
NL_SUM_SQUARES(sum_squares_bf16, uint16_t, NL_LOAD_BF16)

void segment_sum_squares(const real *g, const nl_segment *segs, int64_t nseg, double *out)
{
#pragma omp parallel for schedule(dynamic, 1) if (nseg > 1)
    for (int64_t k = 0; k < nseg; k++)
        out[k] = sum_squares(g + segs[k].offset, segs[k].size);
}

/* A memory-bound pass that runs every training step: threads only pay for their wake-up
   (tens of microseconds on a shared machine) above several million elements. */
#define NL_FINITE_PARALLEL_MIN (NL_PARALLEL_MIN * 128)

int all_finite(const real *x, int64_t n)
{
    int ok = 1;
#pragma omp parallel for schedule(static) reduction(& : ok) if (n >= NL_FINITE_PARALLEL_MIN)
    for (int64_t i = 0; i < n; i++)
        ok &= (x[i] - x[i]) == (x[i] - x[i]);
    return ok;
}

/* ---- linked parameters: bfloat16 gradients in, bfloat16 copies out (fused_optim.h) ---- */

/* out[0 .. n) = w[0 .. n) rounded to bfloat16 (stochastically: the random bits of indices
 * first, first + 1, ... under key, one hash per four elements); 1 when every copy is finite.
 * n <= CHECK_BLOCK. */
static int narrow_run(const real *w, uint16_t *out, int64_t n, int stochastic, uint64_t key,
                      int64_t first)
{
    if (stochastic && n > 0) {
        uint64_t words[CHECK_BLOCK / 4 + 2];
        const int64_t j0 = first >> 2, nj = ((first + n - 1) >> 2) - j0 + 1;
        for (int64_t j = 0; j < nj; j++)
            words[j] = nl_mix64(key ^ (uint64_t)(j0 + j));
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
        /* element e's bits are the (e mod 4)-th 16-bit half-word of its word in memory */
        const bits16 *bits = (const bits16 *)words + (first - 4 * j0);
        for (int64_t i = 0; i < n; i++)
            out[i] = f32_to_bf16_with_bits((float)w[i], bits[i]);
#else
        for (int64_t i = 0; i < n; i++) {
            const int64_t e = first + i;
            out[i] = f32_to_bf16_with_bits((float)w[i],
                                           nl_round_bits(words[(e >> 2) - j0], (uint64_t)e));
        }
#endif
    } else {
        for (int64_t i = 0; i < n; i++)
            out[i] = f32_to_bf16((float)w[i]);
    }
    return finite_bf16_run(out, n);
}

enum { LINK_UPDATE, LINK_WIDEN, LINK_NARROW };

typedef struct {
    const nl_fused_rule *rule;
    real *w, *g, *s0, *s1;
    uint16_t *h0, *h1;
    const nl_rounding *rounding;
} link_args;

/* Elements [a, b) of link l (its own indices); returns 1 when every value written is finite. */
static int link_piece(int op, const link_args *x, const nl_link *l, int64_t a, int64_t b)
{
    const int stochastic = x->rounding && x->rounding->mode == NL_ROUND_STOCHASTIC;
    const uint64_t key = stochastic ? nl_round_key(x->rounding->seed, x->rounding->step,
                                                   (uint64_t)l->ordinal) : 0;
    real gbuf[CHECK_BLOCK];
    int ok = 1;
    for (int64_t e = a; e < b; e += CHECK_BLOCK) {
        const int64_t n = e + CHECK_BLOCK < b ? CHECK_BLOCK : b - e, base = l->offset + e;
        if (op == LINK_WIDEN) {
            for (int64_t i = 0; i < n; i++)
                x->g[base + i] = (real)bf16_to_f32(l->g16[e + i]);
            continue;
        }
        if (op == LINK_UPDATE) {
            for (int64_t i = 0; i < n; i++)
                gbuf[i] = (real)bf16_to_f32(l->g16[e + i]);
            update_run(x->rule, l->flags, n, x->w + base, gbuf, NL_AT(x->s0, base),
                       NL_AT(x->s1, base), NL_AT(x->h0, base), NL_AT(x->h1, base));
            ok &= written_finite(x->rule, base, n, x->w, x->s0, x->s1, x->h0, x->h1);
        }
        ok &= narrow_run(x->w + base, l->w16 + e, n, stochastic, key, e);
    }
    return ok;
}

/* `op` over every link's elements: the concatenated elements in grains of NL_GRAIN handed
 * out dynamically (a descheduled thread delays the pass by one grain; each element's result
 * depends on nothing else, so not on the thread count). */
static int run_links(int op, const link_args *x, const nl_link *links, int64_t nlinks)
{
    int64_t total = 0;
    int ok = 1;
    for (int64_t k = 0; k < nlinks; k++)
        total += links[k].size;
    const int64_t grains = (total + NL_GRAIN - 1) / NL_GRAIN;
#pragma omp parallel for schedule(dynamic, 1) reduction(& : ok) if (total >= NL_PARALLEL_MIN)
    for (int64_t c = 0; c < grains; c++) {
        const int64_t lo = c * NL_GRAIN, hi = lo + NL_GRAIN < total ? lo + NL_GRAIN : total;
        int64_t start = 0;
        for (int64_t k = 0; k < nlinks && start < hi; k++) {
            const int64_t end = start + links[k].size;
            const int64_t a = lo > start ? lo - start : 0, b = (hi < end ? hi : end) - start;
            if (a < b)
                ok &= link_piece(op, x, &links[k], a, b);
            start = end;
        }
    }
    return ok;
}

int fused_update_linked(const nl_fused_rule *rule, const nl_link *links, int64_t nlinks,
                        real *w, real *s0, real *s1, uint16_t *h0, uint16_t *h1,
                        const nl_rounding *rounding)
{
    if (rule->rule < NL_RULE_SGD || rule->rule > NL_RULE_ADAGRAD)
        return -1;
    const link_args x = {rule, w, NULL, s0, s1, h0, h1, rounding};
    return run_links(LINK_UPDATE, &x, links, nlinks) ? 0 : 1;
}

void link_widen_grads(const nl_link *links, int64_t nlinks, real *g)
{
    const link_args x = {NULL, NULL, g, NULL, NULL, NULL, NULL, NULL};
    run_links(LINK_WIDEN, &x, links, nlinks);
}

int link_narrow_values(const nl_link *links, int64_t nlinks, const real *w,
                       const nl_rounding *rounding)
{
    const link_args x = {NULL, (real *)w, NULL, NULL, NULL, NULL, NULL, rounding};
    return run_links(LINK_NARROW, &x, links, nlinks);
}

void link_sum_squares(const nl_link *links, int64_t nlinks, double *out)
{
#pragma omp parallel for schedule(dynamic, 1) if (nlinks > 1)
    for (int64_t k = 0; k < nlinks; k++)
        out[k] = sum_squares_bf16(links[k].g16, links[k].size);
}
