/* The whole-sequence passes of the recurrent cells (see recurrent_sequences.h): one driver
 * loop over time for every cell, forward and backward, with the cells' per-row code from
 * recurrent_cells.h.
 *
 * The units are cut into chunks of SEQ_CHUNK (the last one shorter); chunk k always belongs to
 * thread k mod nthreads.  A thread multiplies only its chunks' columns of each gate block and
 * runs their gate pass, so a step needs one barrier (fprop: h_t complete before the next
 * step's GEMM; bprop: the step's gate gradients complete before the GEMM into dh), and the
 * state gradients of a chunk never leave its thread.  The GEMM calls are the same whatever
 * the thread count, so the results are too.  Each thread first packs its chunks' pieces of U
 * (MKL's ?gemm_pack), which every step's GEMM (?gemm_compute) then reads without packing them
 * again: with only N rows per step, packing U each time would cost about as much as the
 * product. */
#include "no_fp_traps.h"
#include <omp.h>

#include "common.h"
#include "recurrent_sequences.h"
#include "recurrent_cells.h"

#define SEQ_CHUNK 256

/* A cell is named by its gate blocks per unit. */
enum { CELL_RNN = 1, CELL_GRU = 3, CELL_LSTM = 4 };

/* One pass's arguments (recurrent_sequences.h; NULL where the cell has no such array).  The
 * backward pass only reads gates. */
struct pass {
    int cell, reverse, act, gate_act;
    int64_t T, N, H, stride;
    const real *U, *mask, *bias_h, *dy;
    real *gates, *hg, *packed, *h, *c, *hn, *dh, *dc, *dgates, *dgh;
    nl_gemm_pack pk;
    nl_gemm_compute mm;
    int threads;
};

int64_t recurrent_sequence_chunk(void)
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

/* The state entries before (*p) and after (*q) step t. */
static inline void state_entries(const struct pass *a, int64_t t, int64_t *p, int64_t *q)
{
    *p = a->reverse ? t + 1 : t;
    *q = a->reverse ? t : t + 1;
}

/* The forward gate pass of step t over chunk k's units of every row. */
static void fprop_chunk(const struct pass *a, int64_t t, int64_t k)
{
    const int64_t N = a->N, H = a->H, G = a->cell * H, j0 = k * SEQ_CHUNK;
    const int64_t len = chunk_len(H, k);
    int64_t p, q;
    state_entries(a, t, &p, &q);
    const real *hp = a->h + p * N * H, *mask = a->mask ? a->mask + t * N : NULL;
    real *hq = a->h + q * N * H, *gt = a->gates + t * N * G;
    const int common = a->act == ACT_TANH && a->gate_act == ACT_LOGISTIC;
    for (int64_t n = 0; n < N; n++) {
        const int64_t o = n * H + j0, g = n * G + j0;
        const int keep = real_row(mask, n);
        if (a->cell == CELL_RNN && a->act == ACT_TANH)
            rnn_fprop_row(gt + g, a->hg + g, hp + o, hq + o, len, keep, ACT_TANH);
        else if (a->cell == CELL_RNN)
            rnn_fprop_row(gt + g, a->hg + g, hp + o, hq + o, len, keep, a->act);
        else if (a->cell == CELL_GRU)
            gru_fprop_row(gt + g, a->hg + g, a->bias_h + j0, a->hn + t * N * H + o, hp + o,
                          hq + o, len, H, keep);
        else if (common)
            lstm_fprop_row(gt + g, a->hg + g, a->c + p * N * H + o, a->c + q * N * H + o,
                           hp + o, hq + o, len, H, keep, ACT_TANH, ACT_LOGISTIC);
        else
            lstm_fprop_row(gt + g, a->hg + g, a->c + p * N * H + o, a->c + q * N * H + o,
                           hp + o, hq + o, len, H, keep, a->act, a->gate_act);
    }
}

/* The backward gate pass of step t over chunk k's units of every row. */
static void bprop_chunk(const struct pass *a, int64_t t, int64_t k)
{
    const int64_t N = a->N, H = a->H, G = a->cell * H, j0 = k * SEQ_CHUNK;
    const int64_t len = chunk_len(H, k);
    int64_t p, q;
    state_entries(a, t, &p, &q);
    const real *mask = a->mask ? a->mask + t * N : NULL, *gt = a->gates + t * N * G;
    const real *dyt = a->dy ? a->dy + t * N * H : NULL;
    real *dgt = a->dgates + t * N * G;
    const int common = a->act == ACT_TANH && a->gate_act == ACT_LOGISTIC;
    for (int64_t n = 0; n < N; n++) {
        const int64_t o = n * H + j0, g = n * G + j0;
        const int keep = real_row(mask, n);
        const real *dyr = dyt ? dyt + o : NULL;
        if (a->cell == CELL_RNN && a->act == ACT_TANH)
            rnn_bprop_row(a->h + q * N * H + o, dyr, a->dh + o, dgt + g, len, keep, ACT_TANH);
        else if (a->cell == CELL_RNN)
            rnn_bprop_row(a->h + q * N * H + o, dyr, a->dh + o, dgt + g, len, keep, a->act);
        else if (a->cell == CELL_GRU)
            gru_bprop_row(gt + g, a->hn + t * N * H + o, a->h + p * N * H + o, dyr, a->dh + o,
                          dgt + g, a->dgh + t * N * G + g, len, H, keep);
        else if (!keep)
            lstm_bprop_padded_row(dyr, a->dh + o, dgt + g, len, H);
        else if (common)
            lstm_bprop_row(gt + g, a->c + p * N * H + o, a->c + q * N * H + o, dyr, a->dh + o,
                           a->dc + o, dgt + g, len, H, ACT_TANH, ACT_LOGISTIC);
        else
            lstm_bprop_row(gt + g, a->c + p * N * H + o, a->c + q * N * H + o, dyr, a->dh + o,
                           a->dc + o, dgt + g, len, H, a->act, a->gate_act);
    }
}

/* Steps t in the pass's order: per step, each of the thread's chunks gets its columns of every
 * gate block of h_{t-1} U (U's pieces packed once, chunk k's block b at (B k + b) * stride)
 * and then its gate pass. */
static void fprop_pass(const struct pass *a)
{
    const int64_t N = a->N, H = a->H, B = a->cell, G = B * H, chunks = seq_chunks(H);
#pragma omp parallel num_threads(seq_threads(a->threads, H))
    {
        const int64_t tid = omp_get_thread_num(), nth = omp_get_num_threads();
        for (int64_t k = tid; k < chunks; k += nth)
            for (int64_t b = 0; b < B; b++)
                a->pk(NL_ROW_MAJOR, NL_B_MATRIX, NL_NO_TRANS, (int)N, (int)chunk_len(H, k),
                      (int)H, 1, a->U + b * H + k * SEQ_CHUNK, (int)G,
                      a->packed + (B * k + b) * a->stride);
        for (int64_t s = 0; s < a->T; s++) {
            const int64_t t = a->reverse ? a->T - 1 - s : s;
            const real *hp = a->h + (a->reverse ? t + 1 : t) * N * H;
            for (int64_t k = tid; k < chunks; k += nth) {
                const int64_t j0 = k * SEQ_CHUNK;
                for (int64_t b = 0; b < B; b++)
                    a->mm(NL_ROW_MAJOR, NL_NO_TRANS, NL_PACKED, (int)N, (int)chunk_len(H, k),
                          (int)H, hp, (int)H, a->packed + (B * k + b) * a->stride, (int)G, 0,
                          a->hg + b * H + j0, (int)G);
                fprop_chunk(a, t, k);
            }
#pragma omp barrier
        }
    }
}

/* Steps t in the reverse of the pass's order: per step each of the thread's chunks gets its
 * gate pass, then (after a barrier, but not after the last step) its columns of dh += d_t U^T,
 * chunk k's piece of U^T (G, len), the transpose of U's rows j0 .. j0 + len, packed once. */
static void bprop_pass(const struct pass *a)
{
    const int64_t N = a->N, H = a->H, G = a->cell * H, chunks = seq_chunks(H);
    const real *d = a->cell == CELL_GRU ? a->dgh : a->dgates;
    /* dh <- d_t U^T where the bprop step zeroed dh; the GRU's and padded rows' dh stays */
    const real beta = a->cell == CELL_GRU || a->mask ? 1 : 0;
#pragma omp parallel num_threads(seq_threads(a->threads, H))
    {
        const int64_t tid = omp_get_thread_num(), nth = omp_get_num_threads();
        for (int64_t k = tid; k < chunks; k += nth)
            a->pk(NL_ROW_MAJOR, NL_B_MATRIX, NL_TRANS, (int)N, (int)chunk_len(H, k), (int)G, 1,
                  a->U + k * SEQ_CHUNK * G, (int)G, a->packed + k * a->stride);
        for (int64_t s = 0; s < a->T; s++) {
            const int64_t t = a->reverse ? s : a->T - 1 - s;
            for (int64_t k = tid; k < chunks; k += nth)
                bprop_chunk(a, t, k);
#pragma omp barrier
            if (s == a->T - 1)
                break;
            for (int64_t k = tid; k < chunks; k += nth)
                a->mm(NL_ROW_MAJOR, NL_NO_TRANS, NL_PACKED, (int)N, (int)chunk_len(H, k), (int)G,
                      d + t * N * G, (int)G, a->packed + k * a->stride, (int)H, beta,
                      a->dh + k * SEQ_CHUNK, (int)H);
        }
    }
}

#define GEMMS(pack, compute) .pk = (nl_gemm_pack)(intptr_t)(pack), \
    .mm = (nl_gemm_compute)(intptr_t)(compute)

void rnn_fprop_sequence(const real *xg, real *hg, const real *U, real *packed, int64_t stride,
                        real *h, const real *mask, int64_t T, int64_t N, int64_t H,
                        int reverse, int act, int64_t pack, int64_t compute, int threads)
{
    const struct pass a = {.cell = CELL_RNN, .reverse = reverse, .act = act, .T = T, .N = N,
                           .H = H, .stride = stride, .U = U, .mask = mask,
                           .gates = (real *)xg, .hg = hg, .packed = packed, .h = h,
                           GEMMS(pack, compute), .threads = threads};
    fprop_pass(&a);
}

void rnn_bprop_sequence(const real *h, const real *U, real *packed, int64_t stride,
                        const real *dy, real *dh, real *dpre, const real *mask, int64_t T,
                        int64_t N, int64_t H, int reverse, int act, int64_t pack,
                        int64_t compute, int threads)
{
    const struct pass a = {.cell = CELL_RNN, .reverse = reverse, .act = act, .T = T, .N = N,
                           .H = H, .stride = stride, .U = U, .mask = mask, .dy = dy,
                           .packed = packed, .h = (real *)h, .dh = dh, .dgates = dpre,
                           GEMMS(pack, compute), .threads = threads};
    bprop_pass(&a);
}

void lstm_fprop_sequence(real *gates, real *hg, const real *U, real *packed, int64_t stride,
                         real *c, real *h, const real *mask, int64_t T, int64_t N, int64_t H,
                         int reverse, int act, int gate_act, int64_t pack, int64_t compute,
                         int threads)
{
    const struct pass a = {.cell = CELL_LSTM, .reverse = reverse, .act = act,
                           .gate_act = gate_act, .T = T, .N = N, .H = H, .stride = stride,
                           .U = U, .mask = mask, .gates = gates, .hg = hg, .packed = packed,
                           .h = h, .c = c, GEMMS(pack, compute), .threads = threads};
    fprop_pass(&a);
}

void lstm_bprop_sequence(const real *gates, const real *U, real *packed, int64_t stride,
                         const real *c, const real *dy, real *dh, real *dc, real *dgates,
                         const real *mask, int64_t T, int64_t N, int64_t H, int reverse,
                         int act, int gate_act, int64_t pack, int64_t compute, int threads)
{
    const struct pass a = {.cell = CELL_LSTM, .reverse = reverse, .act = act,
                           .gate_act = gate_act, .T = T, .N = N, .H = H, .stride = stride,
                           .U = U, .mask = mask, .dy = dy, .gates = (real *)gates,
                           .packed = packed, .c = (real *)c, .dh = dh, .dc = dc,
                           .dgates = dgates, GEMMS(pack, compute), .threads = threads};
    bprop_pass(&a);
}

void gru_fprop_sequence(real *gates, real *hg, const real *U, real *packed, int64_t stride,
                        const real *bias_h, real *hn, real *h, const real *mask, int64_t T,
                        int64_t N, int64_t H, int reverse, int64_t pack, int64_t compute,
                        int threads)
{
    const struct pass a = {.cell = CELL_GRU, .reverse = reverse, .T = T, .N = N, .H = H,
                           .stride = stride, .U = U, .mask = mask, .bias_h = bias_h,
                           .gates = gates, .hg = hg, .packed = packed, .h = h, .hn = hn,
                           GEMMS(pack, compute), .threads = threads};
    fprop_pass(&a);
}

void gru_bprop_sequence(const real *gates, const real *U, real *packed, int64_t stride,
                        const real *hn, const real *h, const real *dy, real *dh, real *dgx,
                        real *dgh, const real *mask, int64_t T, int64_t N, int64_t H,
                        int reverse, int64_t pack, int64_t compute, int threads)
{
    const struct pass a = {.cell = CELL_GRU, .reverse = reverse, .T = T, .N = N, .H = H,
                           .stride = stride, .U = U, .mask = mask, .dy = dy,
                           .gates = (real *)gates, .packed = packed, .h = (real *)h,
                           .hn = (real *)hn, .dh = dh, .dgates = dgx, .dgh = dgh,
                           GEMMS(pack, compute), .threads = threads};
    bprop_pass(&a);
}
