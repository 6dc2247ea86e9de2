/* Row gather, deterministic scatter-add, strided row copies and bias rows (see rows.h). */
#include "common.h"
#include "rows.h"

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
