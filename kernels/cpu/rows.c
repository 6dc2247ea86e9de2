/* Row gather, deterministic scatter-add, strided row copies and column sums (see rows.h). */
#include "common.h"
#include "rows.h"

/* Columns per work item of the scatter-add: a multiple of the widest vector. */
#define COLS 64

/* Rows a block of add_column_sums adds in `real` before adding them to its double sums. */
#define RUN 32

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

int64_t add_column_sums_work_size(int64_t M, int64_t C)
{
    return nl_block_sums_size(M, C);
}

/* Columns add_column_sums sums at a time, their running sums held in vector registers. */
#define SUM_COLS 64

/* add_column_sums runs on one thread below this many elements: it reads each element once, and
 * one core sums a bias gradient that sits in its cache (768 x 128 floats) in a few
 * microseconds, less than a second thread costs to start and to fetch the other core's lines. */
#define SUM_PARALLEL_MIN (NL_PARALLEL_MIN * 32)

/* r[c] = the sum of rows lo..hi-1 (in that order) of column c of a, for c < C, starting from
 * zero; rows lda elements apart.  Full runs of SUM_COLS columns keep the sums in a local array
 * the compiler holds in registers. */
static void run_sums(const real *a, int64_t lda, int64_t lo, int64_t hi, int64_t C, real *r)
{
    int64_t c0 = 0;
    for (; c0 + SUM_COLS <= C; c0 += SUM_COLS) {
        real acc[SUM_COLS];
        for (int c = 0; c < SUM_COLS; c++)
            acc[c] = 0;
        for (int64_t m = lo; m < hi; m++) {
            const real *row = a + m * lda + c0;
            for (int c = 0; c < SUM_COLS; c++)
                acc[c] += row[c];
        }
        for (int c = 0; c < SUM_COLS; c++)
            r[c0 + c] = acc[c];
    }
    for (int64_t c = c0; c < C; c++)
        r[c] = 0;
    for (int64_t m = lo; m < hi; m++) {
        const real *row = a + m * lda;
        for (int64_t c = c0; c < C; c++)
            r[c] += row[c];
    }
}

void add_column_sums(const real *a, int64_t lda, real *grad, double *work, int64_t M, int64_t C)
{
    const int64_t nb = nl_blocks(M);
    double *part = work;
    real *run = nl_block_sums_runs(work, M, C);
#pragma omp parallel for schedule(dynamic, 1) if (M * C >= SUM_PARALLEL_MIN)
    for (int64_t blk = 0; blk < nb; blk++) {
        double *sum = part + (size_t)blk * (size_t)C;
        real *r = run + (size_t)blk * (size_t)C;
        int64_t lo, hi;
        nl_split(M, blk, nb, &lo, &hi);
        for (int64_t c = 0; c < C; c++)
            sum[c] = 0;
        for (int64_t m0 = lo; m0 < hi; m0 += RUN) {
            run_sums(a, lda, m0, m0 + RUN < hi ? m0 + RUN : hi, C, r);
            for (int64_t c = 0; c < C; c++)
                sum[c] += (double)r[c];
        }
    }
    /* The blocks' sums in block order, block by block (so the loops over columns vectorize)
     * into block 0's. */
    for (int64_t blk = 1; blk < nb; blk++) {
        const double *p = part + (size_t)blk * (size_t)C;
        for (int64_t c = 0; c < C; c++)
            part[c] += p[c];
    }
    for (int64_t c = 0; c < C; c++)
        grad[c] += (real)part[c];
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
