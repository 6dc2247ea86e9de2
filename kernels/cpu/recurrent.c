/* The recurrent gate kernels (see recurrent.h): one pass over the rows of a step, every gate
 * nonlinearity, the cell update and the output (or their derivatives) per element, threads
 * over rows once a step is big enough; and the LSTM's whole-sequence passes, which loop over
 * the time steps here, each step's recurrent GEMM and gate pass on the threads' own units. */
#include <omp.h>

#include "common.h"
#include "recurrent.h"

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

/* A step's gate pass is a few nanoseconds per element once vectorized (an LSTM of 512 units at
 * batch 32, 64k gate elements: under 0.1 ms), which starting a thread team would not repay;
 * only steps of more than GATE_PARALLEL_MIN gate elements run on several threads. */
#define GATE_PARALLEL_MIN (1 << 20)
#define ROWS_PARALLEL(N, per_row) if ((N) * (per_row) >= GATE_PARALLEL_MIN)

void rnn_fprop_step(const real *xg, const real *hg, const real *h_prev, real *h,
                    const real *mask, int64_t N, int64_t H, int act)
{
#pragma omp parallel for schedule(static) ROWS_PARALLEL(N, H)
    for (int64_t n = 0; n < N; n++) {
        const int64_t o = n * H;
        if (real_row(mask, n)) {
            for (int64_t j = 0; j < H; j++)
                h[o + j] = activate(act, xg[o + j] + hg[o + j]);
        } else {
            memcpy(h + o, h_prev + o, (size_t)H * sizeof(real));
        }
    }
}

void rnn_bprop_step(const real *h, const real *dy, real *dh, real *dpre, const real *mask,
                    int64_t N, int64_t H, int act)
{
#pragma omp parallel for schedule(static) ROWS_PARALLEL(N, H)
    for (int64_t n = 0; n < N; n++) {
        const int64_t o = n * H;
        const int keep = real_row(mask, n);
        for (int64_t j = 0; j < H; j++) {
            const real total = dh[o + j] + (dy ? dy[o + j] : 0);
            dpre[o + j] = keep ? total * slope(act, h[o + j]) : 0;
            dh[o + j] = keep ? 0 : total;
        }
    }
}

/* Units [0, len) of one row of lstm_fprop_step, whose gate blocks are H apart; inlined with
 * constant activation codes for the common pair (tanh, logistic), so the compiler drops the
 * switches, and marked `omp simd` (the gate blocks of a row do not overlap), so it vectorizes
 * the loop. */
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

void lstm_fprop_step(real *gates, const real *hg, const real *c_prev, real *c,
                     const real *h_prev, real *h, const real *mask, int64_t N, int64_t H,
                     int act, int gate_act)
{
    const int common = act == ACT_TANH && gate_act == ACT_LOGISTIC;
#pragma omp parallel for schedule(static) ROWS_PARALLEL(N, 4 * H)
    for (int64_t n = 0; n < N; n++) {
        const int64_t o = n * H;
        real *gi = gates + n * 4 * H;
        const real *hi = hg + n * 4 * H;
        const int keep = real_row(mask, n);
        if (common)
            lstm_fprop_row(gi, hi, c_prev + o, c + o, h_prev + o, h + o, H, H, keep, ACT_TANH,
                           ACT_LOGISTIC);
        else
            lstm_fprop_row(gi, hi, c_prev + o, c + o, h_prev + o, h + o, H, H, keep, act,
                           gate_act);
    }
}

/* Units [0, len) of one real (unmasked) row of lstm_bprop_step (see lstm_fprop_row). */
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

/* Units [0, len) of a padded row: no gate gradient, dh takes dy (dc stays). */
static inline void lstm_bprop_padded_row(const real *dy, real *dh, real *di, int64_t len,
                                         int64_t H)
{
    if (dy)
        for (int64_t j = 0; j < len; j++)
            dh[j] += dy[j];
    for (int b = 0; b < 4; b++)
        memset(di + b * H, 0, (size_t)len * sizeof(real));
}

void lstm_bprop_step(const real *gates, const real *c_prev, const real *c, const real *dy,
                     real *dh, real *dc, real *dgates, const real *mask, int64_t N, int64_t H,
                     int act, int gate_act)
{
    const int common = act == ACT_TANH && gate_act == ACT_LOGISTIC;
#pragma omp parallel for schedule(static) ROWS_PARALLEL(N, 4 * H)
    for (int64_t n = 0; n < N; n++) {
        const int64_t o = n * H;
        const real *gi = gates + n * 4 * H;
        real *di = dgates + n * 4 * H;
        const real *dyr = dy ? dy + o : NULL;
        if (!real_row(mask, n))
            lstm_bprop_padded_row(dyr, dh + o, di, H, H);
        else if (common)
            lstm_bprop_row(gi, c_prev + o, c + o, dyr, dh + o, dc + o, di, H, H, ACT_TANH,
                           ACT_LOGISTIC);
        else
            lstm_bprop_row(gi, c_prev + o, c + o, dyr, dh + o, dc + o, di, H, H, act,
                           gate_act);
    }
}

void gru_fprop_step(real *gates, const real *hg, const real *bias_h, real *hn,
                    const real *h_prev, real *h, const real *mask, int64_t N, int64_t H)
{
#pragma omp parallel for schedule(static) ROWS_PARALLEL(N, 3 * H)
    for (int64_t n = 0; n < N; n++) {
        real *gr = gates + n * 3 * H, *gz = gr + H, *gn = gr + 2 * H;
        const real *hr = hg + n * 3 * H, *hz = hr + H, *hh = hr + 2 * H;
        const int64_t o = n * H;
        const int keep = real_row(mask, n);
#pragma omp simd
        for (int64_t j = 0; j < H; j++) {
            const real r = logistic(gr[j] + hr[j] + bias_h[j]);
            const real z = logistic(gz[j] + hz[j] + bias_h[H + j]);
            const real hb = hh[j] + bias_h[2 * H + j];
            const real cand = tanh_exp(gn[j] + r * hb);
            gr[j] = r;
            gz[j] = z;
            gn[j] = cand;
            hn[o + j] = hb;
            h[o + j] = keep ? (1 - z) * cand + z * h_prev[o + j] : h_prev[o + j];
        }
    }
}

void gru_bprop_step(const real *gates, const real *hn, const real *h_prev, const real *dy,
                    real *dh, real *dgx, real *dgh, const real *mask, int64_t N, int64_t H)
{
#pragma omp parallel for schedule(static) ROWS_PARALLEL(N, 3 * H)
    for (int64_t n = 0; n < N; n++) {
        const real *gr = gates + n * 3 * H, *gz = gr + H, *gn = gr + 2 * H;
        real *xr = dgx + n * 3 * H, *xz = xr + H, *xn = xr + 2 * H;
        real *hr = dgh + n * 3 * H, *hz = hr + H, *hh = hr + 2 * H;
        const int64_t o = n * H;
        const int keep = real_row(mask, n);
#pragma omp simd
        for (int64_t j = 0; j < H; j++) {
            const real total = dh[o + j] + (dy ? dy[o + j] : 0);
            const real r = gr[j], z = gz[j], cand = gn[j];
            const real dn = keep ? total * (1 - z) * (1 - cand * cand) : 0;
            const real dz = keep ? total * (h_prev[o + j] - cand) * z * (1 - z) : 0;
            const real dr = dn * hn[o + j] * r * (1 - r);
            xr[j] = hr[j] = dr;
            xz[j] = hz[j] = dz;
            xn[j] = dn;
            hh[j] = dn * r;
            dh[o + j] = keep ? total * z : total;
        }
    }
}

/* ---- the LSTM's whole-sequence passes ------------------------------------------------------
 * The units are cut into chunks of SEQ_CHUNK (the last one shorter); chunk k always belongs to
 * thread k mod nthreads.  A thread multiplies only its chunks' columns of each gate block and
 * runs their gate pass, so a step needs one barrier (fprop: h_t complete before the next
 * step's GEMM; bprop: dgates_t complete before the GEMM into dh), and the state gradients of
 * a chunk never leave its thread.  The GEMM calls are the same whatever the thread count, so
 * the results are too.  Each thread first packs its chunks' pieces of U (MKL's ?gemm_pack),
 * which every step's GEMM (?gemm_compute) then reads without packing them again: with only N
 * rows per step, packing U each time would cost about as much as the product. */
#define SEQ_CHUNK 256

int64_t lstm_sequence_chunk(void)
{
    return SEQ_CHUNK;
}

static inline int64_t seq_chunks(int64_t H)
{
    return (H + SEQ_CHUNK - 1) / SEQ_CHUNK;
}

static inline int64_t chunk_len(int64_t H, int64_t k)
{
    return H - k * SEQ_CHUNK < SEQ_CHUNK ? H - k * SEQ_CHUNK : SEQ_CHUNK;
}

static int seq_threads(int threads, int64_t H)
{
    const int64_t most = threads > 0 ? threads : omp_get_max_threads();
    const int64_t chunks = seq_chunks(H);
    return (int)(most < chunks ? (most < 1 ? 1 : most) : chunks);
}

void lstm_fprop_sequence(real *gates, real *hg, const real *U, real *packed, int64_t stride,
                         real *c, real *h, const real *mask, int64_t T, int64_t N, int64_t H,
                         int reverse, int act, int gate_act, int64_t pack, int64_t compute,
                         int threads)
{
    const nl_gemm_pack pk = (nl_gemm_pack)(intptr_t)pack;
    const nl_gemm_compute mm = (nl_gemm_compute)(intptr_t)compute;
    const int64_t G = 4 * H, chunks = seq_chunks(H);
    const int common = act == ACT_TANH && gate_act == ACT_LOGISTIC;
#pragma omp parallel num_threads(seq_threads(threads, H))
    {
        const int64_t tid = omp_get_thread_num(), nth = omp_get_num_threads();
        for (int64_t k = tid; k < chunks; k += nth)
            for (int64_t b = 0; b < 4; b++)
                pk(NL_ROW_MAJOR, NL_B_MATRIX, NL_NO_TRANS, (int)N, (int)chunk_len(H, k), (int)H,
                   1, U + b * H + k * SEQ_CHUNK, (int)G, packed + (4 * k + b) * stride);
        for (int64_t s = 0; s < T; s++) {
            const int64_t t = reverse ? T - 1 - s : s;
            const int64_t p = reverse ? t + 1 : t, q = reverse ? t : t + 1;
            real *gt = gates + t * N * G;
            const real *hp = h + p * N * H, *cp = c + p * N * H;
            real *hq = h + q * N * H, *cq = c + q * N * H;
            for (int64_t k = tid; k < chunks; k += nth) {
                const int64_t j0 = k * SEQ_CHUNK, len = chunk_len(H, k);
                for (int64_t b = 0; b < 4; b++)
                    mm(NL_ROW_MAJOR, NL_NO_TRANS, NL_PACKED, (int)N, (int)len, (int)H, hp,
                       (int)H, packed + (4 * k + b) * stride, (int)G, 0, hg + b * H + j0,
                       (int)G);
                for (int64_t n = 0; n < N; n++) {
                    const int64_t o = n * H + j0, g = n * G + j0;
                    const int keep = real_row(mask ? mask + t * N : NULL, n);
                    if (common)
                        lstm_fprop_row(gt + g, hg + g, cp + o, cq + o, hp + o, hq + o, len, H,
                                       keep, ACT_TANH, ACT_LOGISTIC);
                    else
                        lstm_fprop_row(gt + g, hg + g, cp + o, cq + o, hp + o, hq + o, len, H,
                                       keep, act, gate_act);
                }
            }
#pragma omp barrier
        }
    }
}

void lstm_bprop_sequence(const real *gates, const real *U, real *packed, int64_t stride,
                         const real *c, const real *dy, real *dh, real *dc, real *dgates,
                         const real *mask, int64_t T, int64_t N, int64_t H, int reverse,
                         int act, int gate_act, int64_t pack, int64_t compute, int threads)
{
    const nl_gemm_pack pk = (nl_gemm_pack)(intptr_t)pack;
    const nl_gemm_compute mm = (nl_gemm_compute)(intptr_t)compute;
    const int64_t G = 4 * H, chunks = seq_chunks(H);
    const int common = act == ACT_TANH && gate_act == ACT_LOGISTIC;
#pragma omp parallel num_threads(seq_threads(threads, H))
    {
        const int64_t tid = omp_get_thread_num(), nth = omp_get_num_threads();
        /* chunk k's piece of U^T, (4H, len): the transpose of U's rows j0 .. j0 + len */
        for (int64_t k = tid; k < chunks; k += nth)
            pk(NL_ROW_MAJOR, NL_B_MATRIX, NL_TRANS, (int)N, (int)chunk_len(H, k), (int)G, 1,
               U + k * SEQ_CHUNK * G, (int)G, packed + k * stride);
        for (int64_t s = 0; s < T; s++) {
            const int64_t t = reverse ? s : T - 1 - s;
            const int64_t p = reverse ? t + 1 : t, q = reverse ? t : t + 1;
            const real *gt = gates + t * N * G, *cp = c + p * N * H, *cq = c + q * N * H;
            const real *dyt = dy ? dy + t * N * H : NULL;
            real *dgt = dgates + t * N * G;
            for (int64_t k = tid; k < chunks; k += nth) {
                const int64_t j0 = k * SEQ_CHUNK, len = chunk_len(H, k);
                for (int64_t n = 0; n < N; n++) {
                    const int64_t o = n * H + j0, g = n * G + j0;
                    const real *dyr = dyt ? dyt + o : NULL;
                    if (!real_row(mask ? mask + t * N : NULL, n))
                        lstm_bprop_padded_row(dyr, dh + o, dgt + g, len, H);
                    else if (common)
                        lstm_bprop_row(gt + g, cp + o, cq + o, dyr, dh + o, dc + o, dgt + g, len,
                                       H, ACT_TANH, ACT_LOGISTIC);
                    else
                        lstm_bprop_row(gt + g, cp + o, cq + o, dyr, dh + o, dc + o, dgt + g, len,
                                       H, act, gate_act);
                }
            }
#pragma omp barrier
            if (s == T - 1)
                break;
            for (int64_t k = tid; k < chunks; k += nth)
                mm(NL_ROW_MAJOR, NL_NO_TRANS, NL_PACKED, (int)N, (int)chunk_len(H, k), (int)G,
                   dgt, (int)G, packed + k * stride, (int)H, mask ? 1 : 0, dh + k * SEQ_CHUNK,
                   (int)H);
        }
    }
}
