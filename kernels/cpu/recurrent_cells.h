/* The per-row gate code of the recurrent cells (recurrent.c and recurrent_sequences.c include
 * this file; it is not a cffi header): the activations and their slopes, and for each cell the
 * forward and backward pass over units [0, len) of one row, so a step kernel (len = H) and a
 * whole-sequence kernel (one chunk of units per thread) run the same per-element code.  A
 * row's gate blocks are H apart; keep is 0 for a padded row (see recurrent.h).  Each row
 * function is inlined with constant activation codes where the caller passes them, so the
 * compiler drops the switches, and marked `omp simd` (the blocks of a row do not overlap).
 * Needs common.h first. */
#ifndef NEONLITE_RECURRENT_CELLS_H
#define NEONLITE_RECURRENT_CELLS_H

enum { ACT_TANH = 0, ACT_LOGISTIC = 1, ACT_RELU = 2, ACT_IDENTITY = 3 };

static inline real logistic(real x)
{
    return 1 / (1 + NL_EXP(-x));
}

/* tanh through one exponential, 1 - 2 / (exp(2x) + 1), so the loops vectorize (exp is the
 * vectorizable nl_expf for float); exp(2x) overflowing to infinity gives 1 exactly. */
static inline real tanh_exp(real x)
{
    return 1 - 2 / (NL_EXP(2 * x) + 1);
}

static inline __attribute__((always_inline)) real activate(int act, real x)
{
    switch (act) {
    case ACT_TANH: return tanh_exp(x);
    case ACT_LOGISTIC: return logistic(x);
    case ACT_RELU: return x > 0 ? x : 0;
    default: return x;
    }
}

/* The derivative from the output y = act(x). */
static inline __attribute__((always_inline)) real slope(int act, real y)
{
    switch (act) {
    case ACT_TANH: return 1 - y * y;
    case ACT_LOGISTIC: return y * (1 - y);
    case ACT_RELU: return y > 0 ? 1 : 0;
    default: return 1;
    }
}

static inline int real_row(const real *mask, int64_t n)
{
    return mask == NULL || mask[n] != 0;
}

/* rnn_fprop_step: h = act(xg + hg) (padded: h_prev); h may be h_prev. */
static inline __attribute__((always_inline)) void rnn_fprop_row(
    const real *xg, const real *hg, const real *h_prev, real *h, int64_t len, int keep, int act)
{
#pragma omp simd
    for (int64_t j = 0; j < len; j++)
        h[j] = keep ? activate(act, xg[j] + hg[j]) : h_prev[j];
}

/* rnn_bprop_step: dpre = (dh + dy) act'(h), dh <- 0 (padded: dpre 0, dh + dy). */
static inline __attribute__((always_inline)) void rnn_bprop_row(
    const real *h, const real *dy, real *dh, real *dpre, int64_t len, int keep, int act)
{
#pragma omp simd
    for (int64_t j = 0; j < len; j++) {
        const real total = dh[j] + (dy ? dy[j] : 0);
        dpre[j] = keep ? total * slope(act, h[j]) : 0;
        dh[j] = keep ? 0 : total;
    }
}

/* lstm_fprop_step: gi the row's gates (in the input projection, out the activated gates),
 * hi its recurrent products. */
static inline __attribute__((always_inline)) void lstm_fprop_row(
    real *gi, const real *hi, const real *c_prev, real *c, const real *h_prev, real *h,
    int64_t len, int64_t H, int keep, int act, int gate_act)
{
    real *gf = gi + H, *gg = gi + 2 * H, *go = gi + 3 * H;
    const real *hf = hi + H, *hgg = hi + 2 * H, *ho = hi + 3 * H;
#pragma omp simd
    for (int64_t j = 0; j < len; j++) {
        const real i = activate(gate_act, gi[j] + hi[j]);
        const real f = activate(gate_act, gf[j] + hf[j]);
        const real g = activate(act, gg[j] + hgg[j]);
        const real og = activate(gate_act, go[j] + ho[j]);
        gi[j] = i;
        gf[j] = f;
        gg[j] = g;
        go[j] = og;
        const real cell = f * c_prev[j] + i * g;
        c[j] = keep ? cell : c_prev[j];
        h[j] = keep ? og * activate(act, cell) : h_prev[j];
    }
}

/* lstm_bprop_step on a real (unmasked) row. */
static inline __attribute__((always_inline)) void lstm_bprop_row(
    const real *gi, const real *c_prev, const real *c, const real *dy, real *dh, real *dc,
    real *di, int64_t len, int64_t H, int act, int gate_act)
{
    const real *gf = gi + H, *gg = gi + 2 * H, *go = gi + 3 * H;
    real *df = di + H, *dg = di + 2 * H, *dout = di + 3 * H;
#pragma omp simd
    for (int64_t j = 0; j < len; j++) {
        const real total = dh[j] + (dy ? dy[j] : 0);
        const real act_c = activate(act, c[j]);
        const real dcell = dc[j] + total * go[j] * slope(act, act_c);
        di[j] = dcell * gg[j] * slope(gate_act, gi[j]);
        df[j] = dcell * c_prev[j] * slope(gate_act, gf[j]);
        dg[j] = dcell * gi[j] * slope(act, gg[j]);
        dout[j] = total * act_c * slope(gate_act, go[j]);
        dc[j] = dcell * gf[j];
        dh[j] = 0;
    }
}

/* lstm_bprop_step on a padded row: no gate gradient, dh takes dy (dc stays). */
static inline void lstm_bprop_padded_row(const real *dy, real *dh, real *di, int64_t len,
                                         int64_t H)
{
    if (dy)
        for (int64_t j = 0; j < len; j++)
            dh[j] += dy[j];
    for (int b = 0; b < 4; b++)
        memset(di + b * H, 0, (size_t)len * sizeof(real));
}

/* gru_fprop_step: gr the row's gates (r, z, n blocks), hr its recurrent products, bias_h the
 * recurrent bias at the same units (blocks H apart), hn and h_prev, h the row's states. */
static inline __attribute__((always_inline)) void gru_fprop_row(
    real *gr, const real *hr, const real *bias_h, real *hn, const real *h_prev, real *h,
    int64_t len, int64_t H, int keep)
{
    real *gz = gr + H, *gn = gr + 2 * H;
    const real *hz = hr + H, *hh = hr + 2 * H;
#pragma omp simd
    for (int64_t j = 0; j < len; j++) {
        const real r = logistic(gr[j] + hr[j] + bias_h[j]);
        const real z = logistic(gz[j] + hz[j] + bias_h[H + j]);
        const real hb = hh[j] + bias_h[2 * H + j];
        const real cand = tanh_exp(gn[j] + r * hb);
        gr[j] = r;
        gz[j] = z;
        gn[j] = cand;
        hn[j] = hb;
        h[j] = keep ? (1 - z) * cand + z * h_prev[j] : h_prev[j];
    }
}

/* gru_bprop_step: xr, hr the row's gradients of the input projection and of the recurrent
 * term (r, z, n blocks). */
static inline __attribute__((always_inline)) void gru_bprop_row(
    const real *gr, const real *hn, const real *h_prev, const real *dy, real *dh, real *xr,
    real *hr, int64_t len, int64_t H, int keep)
{
    const real *gz = gr + H, *gn = gr + 2 * H;
    real *xz = xr + H, *xn = xr + 2 * H, *hz = hr + H, *hh = hr + 2 * H;
#pragma omp simd
    for (int64_t j = 0; j < len; j++) {
        const real total = dh[j] + (dy ? dy[j] : 0);
        const real r = gr[j], z = gz[j], cand = gn[j];
        const real dn = keep ? total * (1 - z) * (1 - cand * cand) : 0;
        const real dz = keep ? total * (h_prev[j] - cand) * z * (1 - z) : 0;
        const real dr = dn * hn[j] * r * (1 - r);
        xr[j] = hr[j] = dr;
        xz[j] = hz[j] = dz;
        xn[j] = dn;
        hh[j] = dn * r;
        dh[j] = keep ? total * z : total;
    }
}

#endif
