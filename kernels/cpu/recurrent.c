/* The recurrent gate kernels (see recurrent.h): one pass over the rows of a step, every gate
 * nonlinearity, the cell update and the output (or their derivatives) per element, threads
 * over rows once a step is big enough.  The per-row code is recurrent_cells.h's, which the
 * whole-sequence passes (recurrent_sequences.c) share. */
#include "no_fp_traps.h"
#include "common.h"
#include "recurrent.h"
#include "recurrent_cells.h"

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
        const int keep = real_row(mask, n);
        if (act == ACT_TANH)
            rnn_fprop_row(xg + o, hg + o, h_prev + o, h + o, H, keep, ACT_TANH);
        else
            rnn_fprop_row(xg + o, hg + o, h_prev + o, h + o, H, keep, act);
    }
}

void rnn_bprop_step(const real *h, const real *dy, real *dh, real *dpre, const real *mask,
                    int64_t N, int64_t H, int act)
{
#pragma omp parallel for schedule(static) ROWS_PARALLEL(N, H)
    for (int64_t n = 0; n < N; n++) {
        const int64_t o = n * H;
        const int keep = real_row(mask, n);
        const real *dyr = dy ? dy + o : NULL;
        if (act == ACT_TANH)
            rnn_bprop_row(h + o, dyr, dh + o, dpre + o, H, keep, ACT_TANH);
        else
            rnn_bprop_row(h + o, dyr, dh + o, dpre + o, H, keep, act);
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
        const int64_t o = n * H;
        gru_fprop_row(gates + n * 3 * H, hg + n * 3 * H, bias_h, hn + o, h_prev + o, h + o, H,
                      H, real_row(mask, n));
    }
}

void gru_bprop_step(const real *gates, const real *hn, const real *h_prev, const real *dy,
                    real *dh, real *dgx, real *dgh, const real *mask, int64_t N, int64_t H)
{
#pragma omp parallel for schedule(static) ROWS_PARALLEL(N, 3 * H)
    for (int64_t n = 0; n < N; n++) {
        const int64_t o = n * H;
        gru_bprop_row(gates + n * 3 * H, hn + o, h_prev + o, dy ? dy + o : NULL, dh + o,
                      dgx + n * 3 * H, dgh + n * 3 * H, H, H, real_row(mask, n));
    }
}
