/* Row gather, deterministic scatter-add, strided row copies and bias rows (see rows.h). */
#include "common.h"
#include "rows.h"
#include "bf16_rows.h"

/* Columns per work item of the scatter-add: a multiple of the widest vector. */
#define COLS 64

void take_rows(const real *table, const int64_t *ids, real *out, int64_t n, int64_t D)
{
#pragma omp parallel for schedule(static) if (n * D >= NL_PARALLEL_MIN)
    for (int64_t i = 0; i < n; i++)
        memcpy(out + i * D, table + ids[i] * D, (size_t)D * sizeof(real));
}

void scatter_add_rows(real *grad, const int64_t *ids, const real *rows, int64_t n, int64_t D)
{
    const int64_t parts = (D + COLS - 1) / COLS;
#pragma omp parallel for schedule(dynamic, 1) if (n * D >= NL_PARALLEL_MIN && parts > 1)
    for (int64_t p = 0; p < parts; p++) {
        const int64_t c0 = p * COLS, c1 = c0 + COLS < D ? c0 + COLS : D;
        for (int64_t i = 0; i < n; i++) {
            real *g = grad + ids[i] * D;
            const real *r = rows + i * D;
            for (int64_t c = c0; c < c1; c++)
                g[c] += r[c];
        }
    }
}

/* The C rows of one (a, b) pair, `bytes` each.  Rows of 64, 128 or 256 bytes (an attention
 * head of 16 to 64 float or 8 to 32 double) copy with a constant size the compiler inlines as a
 * few vector moves instead of a call per row. */
#define COPY_ROWS(width)                                                                        \
    for (int64_t c = 0; c < C; c++)                                                             \
        memcpy(d + c * dc, s + c * sc, width)

void copy_rows(const real *src, int64_t sa, int64_t sb, int64_t sc, real *dst, int64_t da,
               int64_t db, int64_t dc, int64_t A, int64_t B, int64_t C, int64_t D)
{
    const size_t bytes = (size_t)D * sizeof(real);
#pragma omp parallel for collapse(2) schedule(static) if (A * B * C * D >= NL_PARALLEL_MIN)
    for (int64_t a = 0; a < A; a++)
        for (int64_t b = 0; b < B; b++) {
            const real *s = src + a * sa + b * sb;
            real *d = dst + a * da + b * db;
            if (bytes == 64)
                COPY_ROWS(64);
            else if (bytes == 128)
                COPY_ROWS(128);
            else if (bytes == 256)
                COPY_ROWS(256);
            else
                COPY_ROWS(bytes);
        }
}

void add_row(const real *x, const real *row, real *out, int64_t M, int64_t C)
{
#pragma omp parallel for schedule(dynamic, nl_grain(C)) if (M * C >= NL_PARALLEL_MIN)
    for (int64_t m = 0; m < M; m++) {
        const real *xr = x + m * C;
        real *o = out + m * C;
        for (int64_t c = 0; c < C; c++)
            o[c] = xr[c] + row[c];
    }
}

/* ---- bfloat16 rows (rows.h: add_row_bf16, scatter_add_rows_bf16, row_combination_bf16) */

void add_row_bf16(const uint16_t *x, const uint16_t *row, uint16_t *out, int64_t M, int64_t C)
{
#pragma omp parallel for schedule(dynamic, nl_grain(C)) if (M * C >= NL_PARALLEL_MIN)
    for (int64_t m = 0; m < M; m++) {
        const uint16_t *xr = x + m * C;
        uint16_t *o = out + m * C;
#pragma omp simd
        for (int64_t c = 0; c < C; c++)
            o[c] = f32_to_bf16(bf16_to_f32(xr[c]) + bf16_to_f32(row[c]));
    }
}

/* order[0, n) = 0 .. n - 1 sorted by ids[order[j]] (each in [0, V)), stably: a counting sort
 * through count (V + 1 int64). */
static void order_by_id(const int64_t *ids, int64_t *order, int64_t *count, int64_t n,
                        int64_t V)
{
    for (int64_t v = 0; v <= V; v++)
        count[v] = 0;
    for (int64_t i = 0; i < n; i++)
        count[ids[i] + 1]++;
    for (int64_t v = 0; v < V; v++)
        count[v + 1] += count[v];
    for (int64_t i = 0; i < n; i++)
        order[count[ids[i]]++] = i;
}

/* The first position at or after j (< n) where a run of equal ids in sorted order starts. */
static int64_t group_start(const int64_t *ids, const int64_t *order, int64_t j, int64_t n)
{
    while (j > 0 && j < n && ids[order[j]] == ids[order[j - 1]])
        j++;
    return j;
}

/* bf16_accumulate, not inlined: inlined into add_group_bf16's loop over rows, GCC jams two
 * rows into one loop that it does not vectorize. */
static __attribute__((noinline)) void accumulate_row(real *restrict acc,
                                                     const uint16_t *restrict bits, int64_t n)
{
    bf16_accumulate(acc, bits, n);
}

/* acc[k] += wm * bits[k] widened (k < n), in float; not inlined, as accumulate_row. */
static __attribute__((noinline)) void accumulate_weighted_row(float *restrict acc, float wm,
                                                              const uint16_t *restrict bits,
                                                              int64_t n)
{
#pragma omp simd
    for (int64_t k = 0; k < n; k++)
        acc[k] += wm * bf16_to_f32(bits[k]);
}

/* acc[k] += w[0] * r0[k] + ... + w[3] * r3[k] (k < n), added in that order in float, the rows
 * bf16 bits; not inlined, as accumulate_row.  Four rows a call keep acc in registers across
 * them and the call's cost low for short rows. */
static __attribute__((noinline)) void accumulate_weighted_rows(
    float *restrict acc, const float *w, const uint16_t *restrict r0,
    const uint16_t *restrict r1, const uint16_t *restrict r2, const uint16_t *restrict r3,
    int64_t n)
{
    const float w0 = w[0], w1 = w[1], w2 = w[2], w3 = w[3];
#pragma omp simd
    for (int64_t k = 0; k < n; k++) {
        float a = acc[k];
        a += w0 * bf16_to_f32(r0[k]);
        a += w1 * bf16_to_f32(r1[k]);
        a += w2 * bf16_to_f32(r2[k]);
        a += w3 * bf16_to_f32(r3[k]);
        acc[k] = a;
    }
}

/* grad row g += the rows order[j0 .. j1) (one id's rows, in id order): widened a chunk at a
 * time, summed in `real` in that order, rounded once. */
static void add_group_bf16(uint16_t *g, const uint16_t *rows, const int64_t *order, int64_t j0,
                           int64_t j1, int64_t D)
{
    real acc[BF16_ROW_CHUNK] BF16_ALIGNED;
    for (int64_t d0 = 0; d0 < D; d0 += BF16_ROW_CHUNK) {
        const int64_t n = bf16_chunk(D, d0);
        bf16_widen(g + d0, acc, n);
        for (int64_t j = j0; j < j1; j++)
            accumulate_row(acc, rows + order[j] * D + d0, n);
        bf16_narrow(acc, g + d0, n);
    }
}

int64_t scatter_add_rows_bf16_work_size(int64_t n, int64_t V)
{
    return n + V + 1;
}

void scatter_add_rows_bf16(uint16_t *grad, const int64_t *ids, const uint16_t *rows,
                           int64_t *work, int64_t n, int64_t D, int64_t V)
{
    int64_t *order = work;
    order_by_id(ids, order, work + n, n, V);
    const int64_t parts = nl_blocks(n);
#pragma omp parallel for schedule(dynamic, 1) if (n * D >= NL_PARALLEL_MIN)
    for (int64_t p = 0; p < parts; p++) {
        int64_t lo, hi;
        nl_split(n, p, parts, &lo, &hi);
        const int64_t end = group_start(ids, order, hi, n);
        for (int64_t j0 = group_start(ids, order, lo, n), j1; j0 < end; j0 = j1) {
            for (j1 = j0 + 1; j1 < n && ids[order[j1]] == ids[order[j0]]; j1++)
                ;
            add_group_bf16(grad + ids[order[j0]] * D, rows, order, j0, j1, D);
        }
    }
}

/* row_combination_bf16's tasks where its columns alone make fewer: the rows are cut into
 * blocks too, each block's rows summed in order into a partial sum, the partials then added in
 * block order.  The blocks depend on M and K only (never on the thread count), so the bits do
 * not either.  Without them a bias gradient of at most BF16_ROW_CHUNK columns (most of a small
 * transformer's) ran on one thread. */
#define ROW_COMBINATION_TASKS 4
/* rows a block has at least */
#define ROW_COMBINATION_ROWS 128

/* acc[k] (k < n) += sum over rows m in [lo, hi) of w[m] * B[m, c0 + k], in row order, four
 * rows a call. */
static void combine_rows(float *acc, const uint16_t *w, const uint16_t *B, int64_t ldb,
                         int64_t lo, int64_t hi, int64_t c0, int64_t n)
{
    int64_t m = lo;
    for (; m + 4 <= hi; m += 4) {
        const float wm[4] = {bf16_to_f32(w[m]), bf16_to_f32(w[m + 1]), bf16_to_f32(w[m + 2]),
                             bf16_to_f32(w[m + 3])};
        const uint16_t *r = B + m * ldb + c0;
        accumulate_weighted_rows(acc, wm, r, r + ldb, r + 2 * ldb, r + 3 * ldb, n);
    }
    for (; m < hi; m++)
        accumulate_weighted_row(acc, bf16_to_f32(w[m]), B + m * ldb + c0, n);
}

/* o[k] = alpha * acc[k] + beta * o[k] rounded (o not read where beta is 0), k < n. */
static void store_combination(uint16_t *o, const float *acc, int64_t n, double alpha,
                              double beta)
{
    const float a = (float)alpha, b = (float)beta;
    if (b != 0.0f) {
        for (int64_t k = 0; k < n; k++)
            o[k] = f32_to_bf16(a * acc[k] + b * bf16_to_f32(o[k]));
    } else {
        for (int64_t k = 0; k < n; k++)
            o[k] = f32_to_bf16(a * acc[k]);
    }
}

void row_combination_bf16(const uint16_t *w, const uint16_t *B, int64_t ldb, int64_t M,
                          int64_t K, double alpha, double beta, uint16_t *out)
{
    const int64_t parts = (K + BF16_ROW_CHUNK - 1) / BF16_ROW_CHUNK;
    const int parallel = M * K >= NL_PARALLEL_MIN;
    int64_t blocks = 1;
    if (parallel && parts < ROW_COMBINATION_TASKS) {
        const int64_t most = M / ROW_COMBINATION_ROWS;
        blocks = ROW_COMBINATION_TASKS / parts;
        blocks = blocks < most ? blocks : most;
        blocks = blocks < 1 ? 1 : blocks;
    }
    float partial[ROW_COMBINATION_TASKS][BF16_ROW_CHUNK] BF16_ALIGNED;
#pragma omp parallel for schedule(dynamic, 1) if (parallel && parts * blocks > 1)
    for (int64_t t = 0; t < parts * blocks; t++) {
        const int64_t p = t / blocks, c0 = p * BF16_ROW_CHUNK, n = bf16_chunk(K, c0);
        float own[BF16_ROW_CHUNK] BF16_ALIGNED;
        float *acc = blocks > 1 ? partial[t] : own;
        int64_t lo, hi;
        nl_split(M, t % blocks, blocks, &lo, &hi);
        for (int64_t k = 0; k < n; k++)
            acc[k] = 0;
        combine_rows(acc, w, B, ldb, lo, hi, c0, n);
        if (blocks == 1)
            store_combination(out + c0, acc, n, alpha, beta);
    }
    if (blocks == 1)
        return;
    for (int64_t p = 0; p < parts; p++) {
        const int64_t c0 = p * BF16_ROW_CHUNK, n = bf16_chunk(K, c0);
        float *sum = partial[p * blocks];
        for (int64_t b = 1; b < blocks; b++)
            for (int64_t k = 0; k < n; k++)
                sum[k] += partial[p * blocks + b][k];
        store_combination(out + c0, sum, n, alpha, beta);
    }
}
