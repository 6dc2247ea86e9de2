/* The fused attention on bf16 operands with bf16 arithmetic (attention_compute.h): each
 * product of a block of queries on the bf16 GEMM, the softmax and its gradient in float32 on
 * the block's rows of scores. */
#include <math.h>
#include <omp.h>

#include "../bf16_bits.h"
#include "../common.h"
#include "attention_compute.h"

/* queries per block */
#define ATT_BQ 64

typedef int (*nl_gemm_bf16_fn)(const uint16_t *A, const uint16_t *B, float *C, uint16_t *Cb,
                               int64_t M, int64_t N, int64_t K, int64_t lda, int64_t ldb,
                               int64_t ldc, int64_t ldcb, int transA, int transB, float alpha,
                               float beta, int threads, void *work);

static int64_t lines(int64_t bytes) { return (bytes + 63) / 64 * 64; }

/* one GEMM call, its status kept in `status` (the most negative wins) */
#define ATT_MM(...)                                                                           \
    do {                                                                                      \
        const int done_ = mm(__VA_ARGS__);                                                    \
        status = done_ < status ? done_ : status;                                             \
    } while (0)

int att_compute_threads(void) { return omp_get_max_threads(); }

/* A thread's slice of the work (bytes, each part on a cache line): scores or probabilities
 * (ATT_BQ x Tk float32), dP (the same), their bf16 copy (ATT_BQ x Tk), a block's output rows
 * (ATT_BQ x max(dk, dv) float32), dk's and dv's sums (Tk x dk, Tk x dv float32), the GEMM's
 * packing buffers. */
typedef struct {
    float *s, *dp, *rows, *dk, *dv;
    uint16_t *p;
    void *gemm;
} att_parts;

static int64_t slice_bytes(int64_t Tk, int64_t dk, int64_t dv, int64_t gemm_work)
{
    const int64_t wide = dk > dv ? dk : dv, scores = ATT_BQ * Tk;
    return 2 * lines(scores * 4) + lines(scores * 2) + lines(ATT_BQ * wide * 4) +
           lines(Tk * dk * 4) + lines(Tk * dv * 4) + lines(gemm_work);
}

int64_t att_compute_work_bytes(int64_t Tk, int64_t dk, int64_t dv, int64_t gemm_work,
                               int64_t nwork)
{
    return nwork * slice_bytes(Tk, dk, dv, gemm_work);
}

static att_parts parts_of(void *work, int64_t Tk, int64_t dk, int64_t dv, int64_t gemm_work)
{
    const int64_t wide = dk > dv ? dk : dv, scores = ATT_BQ * Tk;
    uint8_t *at = (uint8_t *)work + omp_get_thread_num() * slice_bytes(Tk, dk, dv, gemm_work);
    att_parts w;
    w.s = (float *)at;
    at += lines(scores * 4);
    w.dp = (float *)at;
    at += lines(scores * 4);
    w.p = (uint16_t *)at;
    at += lines(scores * 2);
    w.rows = (float *)at;
    at += lines(ATT_BQ * wide * 4);
    w.dk = (float *)at;
    at += lines(Tk * dk * 4);
    w.dv = (float *)at;
    at += lines(Tk * dv * 4);
    w.gemm = at;
    return w;
}

/* element offset of row 0 of slice b of operand `which` (strides[3 * which ..]) */
static inline int64_t slice_at(const int64_t *strides, int which, int64_t b, int64_t heads)
{
    const int64_t *s = strides + 3 * which;
    return (b / heads) * s[0] + (b % heads) * s[1];
}

/* the keys [0, n) that query rows [i0, i0 + rows) may see (the rest are causally hidden) */
static inline int64_t visible_keys(int64_t i0, int64_t rows, int64_t Tq, int64_t Tk, int causal)
{
    if (!causal)
        return Tk;
    const int64_t n = i0 + rows + Tk - Tq;
    return n < 0 ? 0 : (n > Tk ? Tk : n);
}

/* key j hidden from query i */
static inline int hidden(int64_t i, int64_t j, int64_t Tq, int64_t Tk, int causal,
                         const float *mask_row)
{
    return (causal && j > i + Tk - Tq) || (mask_row != NULL && mask_row[j] == 0.0f);
}

/* Row r (query i) of the block's scores s (ld Tk, nk keys) -> probabilities exp(s - lse),
 * hidden keys 0, also rounded to bf16 into p; with `find`, lse is the row's log-sum-exp
 * (-inf where every key is hidden), else it is given.  Returns lse. */
static float softmax_row(float *s, uint16_t *p, int64_t nk, int64_t i, int64_t Tq,
                         int64_t Tk, int causal, const float *mask_row, int find, float lse)
{
    if (find) {
        float peak = -INFINITY;
        for (int64_t j = 0; j < nk; j++)
            if (!hidden(i, j, Tq, Tk, causal, mask_row) && s[j] > peak)
                peak = s[j];
        lse = -INFINITY;
        if (peak != -INFINITY) {
            float total = 0.0f;
            for (int64_t j = 0; j < nk; j++)
                if (!hidden(i, j, Tq, Tk, causal, mask_row))
                    total += expf(s[j] - peak);
            lse = peak + logf(total);
        }
    }
    for (int64_t j = 0; j < nk; j++) {
        const float e = (lse == -INFINITY || hidden(i, j, Tq, Tk, causal, mask_row))
                            ? 0.0f : expf(s[j] - lse);
        s[j] = e;
        p[j] = f32_to_bf16(e);
    }
    return lse;
}

int att_fprop_compute(const uint16_t *q, const uint16_t *k, const uint16_t *v, uint16_t *out,
                       float *lse, int64_t B, int64_t heads, int64_t Tq, int64_t Tk,
                       int64_t dk, int64_t dv, const int64_t *strides, float scale,
                       int causal, const float *mask, int64_t gemm, void *work,
                       int64_t gemm_work, int64_t nwork)
{
    const nl_gemm_bf16_fn mm = (nl_gemm_bf16_fn)(intptr_t)gemm;
    const int64_t nqb = (Tq + ATT_BQ - 1) / ATT_BQ;
    const int64_t sq = strides[2], sk = strides[5], sv = strides[8], so = strides[11];
    int status = 0;
#pragma omp parallel for num_threads(nwork) schedule(dynamic, 1) reduction(min : status)
    for (int64_t t = 0; t < B * nqb; t++) {
        const att_parts w = parts_of(work, Tk, dk, dv, gemm_work);
        const int64_t b = t / nqb, i0 = (t % nqb) * ATT_BQ;
        const int64_t rows = Tq - i0 < ATT_BQ ? Tq - i0 : ATT_BQ;
        const int64_t nk = visible_keys(i0, rows, Tq, Tk, causal);
        const uint16_t *qb = q + slice_at(strides, 0, b, heads) + i0 * sq;
        const uint16_t *kb = k + slice_at(strides, 1, b, heads);
        const uint16_t *vb = v + slice_at(strides, 2, b, heads);
        uint16_t *ob = out + slice_at(strides, 3, b, heads) + i0 * so;
        const float *mask_row = mask ? mask + (b / heads) * Tk : NULL;
        if (nk > 0)
            ATT_MM(qb, kb, w.s, NULL, rows, nk, dk, sq, sk, Tk, 0, 0, 1, scale, 0.0f, 1,
                   w.gemm);
        for (int64_t r = 0; r < rows; r++)
            lse[b * Tq + i0 + r] = softmax_row(w.s + r * Tk, w.p + r * Tk, nk, i0 + r, Tq, Tk,
                                               causal, mask_row, 1, 0.0f);
        ATT_MM(w.p, vb, w.rows, ob, rows, dv, nk, Tk, sv, dv, so, 0, 0, 1.0f, 0.0f, 1, w.gemm);
    }
    return status;
}

/* rows x cols float32 sums (ld cols) rounded into bf16 rows of stride ld */
static void narrow_rows(const float *sum, uint16_t *x, int64_t rows, int64_t cols, int64_t ld)
{
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++)
            x[r * ld + c] = f32_to_bf16(sum[r * cols + c]);
}

int att_bprop_compute(const uint16_t *q, const uint16_t *k, const uint16_t *v,
                       const uint16_t *out, const float *lse, const uint16_t *dout,
                       uint16_t *dq, uint16_t *dk, uint16_t *dv, int64_t B, int64_t heads,
                       int64_t Tq, int64_t Tk, int64_t dkw, int64_t dvw,
                       const int64_t *strides, float scale, int causal, const float *mask,
                       int64_t gemm, void *work, int64_t gemm_work, int64_t nwork)
{
    const nl_gemm_bf16_fn mm = (nl_gemm_bf16_fn)(intptr_t)gemm;
    const int64_t sq = strides[2], sk = strides[5], sv = strides[8], so = strides[11];
    const int64_t sdo = strides[14], sdq = strides[17], sdk = strides[20], sdv = strides[23];
    int status = 0;
#pragma omp parallel for num_threads(nwork) schedule(dynamic, 1) reduction(min : status)
    for (int64_t b = 0; b < B; b++) {
        const att_parts w = parts_of(work, Tk, dkw, dvw, gemm_work);
        const uint16_t *qs = q + slice_at(strides, 0, b, heads);
        const uint16_t *ks = k + slice_at(strides, 1, b, heads);
        const uint16_t *vs = v + slice_at(strides, 2, b, heads);
        const uint16_t *os = out + slice_at(strides, 3, b, heads);
        const uint16_t *dos = dout + slice_at(strides, 4, b, heads);
        uint16_t *dqs = dq + slice_at(strides, 5, b, heads);
        const float *mask_row = mask ? mask + (b / heads) * Tk : NULL;
        memset(w.dk, 0, (size_t)(Tk * dkw) * sizeof(float));
        memset(w.dv, 0, (size_t)(Tk * dvw) * sizeof(float));
        for (int64_t i0 = 0; i0 < Tq; i0 += ATT_BQ) {
            const int64_t rows = Tq - i0 < ATT_BQ ? Tq - i0 : ATT_BQ;
            const int64_t nk = visible_keys(i0, rows, Tq, Tk, causal);
            const uint16_t *qb = qs + i0 * sq, *dob = dos + i0 * sdo;
            if (nk == 0) {
                ATT_MM(qb, ks, w.rows, dqs + i0 * sdq, rows, dkw, 0, sq, sk, dkw, sdq, 0, 0,
                       1.0f, 0.0f, 1, w.gemm);
                continue;
            }
            ATT_MM(qb, ks, w.s, NULL, rows, nk, dkw, sq, sk, Tk, 0, 0, 1, scale, 0.0f, 1,
                   w.gemm);
            for (int64_t r = 0; r < rows; r++)
                softmax_row(w.s + r * Tk, w.p + r * Tk, nk, i0 + r, Tq, Tk, causal, mask_row,
                            0, lse[b * Tq + i0 + r]);
            /* dv += P^T dout */
            ATT_MM(w.p, dob, w.dv, NULL, nk, dvw, rows, Tk, sdo, dvw, 0, 1, 0, 1.0f, 1.0f, 1,
                   w.gemm);
            /* dP = dout v^T */
            ATT_MM(dob, vs, w.dp, NULL, rows, nk, dvw, sdo, sv, Tk, 0, 0, 1, 1.0f, 0.0f, 1,
                   w.gemm);
            for (int64_t r = 0; r < rows; r++) {
                const uint16_t *o_row = os + (i0 + r) * so, *do_row = dob + r * sdo;
                float d = 0.0f;
                for (int64_t c = 0; c < dvw; c++)
                    d += bf16_to_f32(do_row[c]) * bf16_to_f32(o_row[c]);
                const float *p_row = w.s + r * Tk, *dp_row = w.dp + r * Tk;
                uint16_t *ds_row = w.p + r * Tk;
                for (int64_t j = 0; j < nk; j++)
                    ds_row[j] = f32_to_bf16(p_row[j] * (dp_row[j] - d) * scale);
            }
            /* dq = dS k (final: every key of the block's rows), dk += dS^T q */
            ATT_MM(w.p, ks, w.rows, dqs + i0 * sdq, rows, dkw, nk, Tk, sk, dkw, sdq, 0, 0,
                   1.0f, 0.0f, 1, w.gemm);
            ATT_MM(w.p, qb, w.dk, NULL, nk, dkw, rows, Tk, sq, dkw, 0, 1, 0, 1.0f, 1.0f, 1,
                   w.gemm);
        }
        narrow_rows(w.dk, dk + slice_at(strides, 6, b, heads), Tk, dkw, sdk);
        narrow_rows(w.dv, dv + slice_at(strides, 7, b, heads), Tk, dvw, sdv);
    }
    return status;
}
