/* Block-sparse kernels (see blocksparse.c).  Block sizes bs: 8, 16, 32, 64.  Lookup tables as
 * in neonlite/blocksparse/tables.py: a walk is (ptr, k, other): the entries of output block o
 * are e = ptr[o] .. ptr[o+1]-1, each naming stored block k[e] and the input block other[e]. */

/* The weight gradient packs MC = bs_chunk_rows() rows of both operands at a time; fprop and
 * bprop give each of up to bs_threads() threads MT = bs_task_rows() rows at a time. */
int bs_chunk_rows(void);
int bs_task_rows(void);
int bs_threads(void);

/* y (M, nout) = x (M, nin) @ W for W's blocks w (nnz, bs, bs), walking the columns
 * (col_ptr, col_k, col_other).  pack: bs_threads() * MT * nin scratch. */
void bs_linear_fprop(const real *x, const real *w, real *y, int64_t M, int64_t nin,
                     int64_t nout, int64_t bs, const int32_t *ptr, const int32_t *kidx,
                     const int32_t *other, real *pack);

/* dx (M, nin) = beta * dx + e (M, nout) @ W^T, walking the rows (row_ptr, row_k, row_other).
 * pack: bs_threads() * MT * nout scratch; wt: nnz * bs * bs scratch (the transposed blocks). */
void bs_linear_bprop(const real *e, const real *w, real *dx, int64_t M, int64_t nin,
                     int64_t nout, int64_t bs, int64_t nnz, const int32_t *ptr,
                     const int32_t *kidx, const int32_t *other, real *pack, real *wt, real beta);

/* dw[k] (bs, bs) = beta * dw[k] + x[:, row[k]]^T @ e[:, col[k]] for every stored block k.
 * packx: MC * nin and packe: MC * nout scratch. */
void bs_linear_update(const real *x, const real *e, real *dw, int64_t M, int64_t nin,
                      int64_t nout, int64_t bs, int64_t nnz, const int32_t *row,
                      const int32_t *col, real *packx, real *packe, real beta);

/* s[n, k] (bs, bs) = alpha * a[n, h, i] @ b[n, h, j]^T for block k at (head[k], row[k], col[k]);
 * a (N, H, Tq, d), b (N, H, Tk, d), s (N, nnz, bs, bs).  work: bs_threads() * d * bs scratch
 * (each thread's transposed block of b). */
void bs_sdd(const real *a, const real *b, real *s, int64_t N, int64_t H, int64_t Tq,
            int64_t Tk, int64_t d, int64_t bs, int64_t nnz, const int32_t *head,
            const int32_t *row, const int32_t *col, real alpha, real *work);

/* o[n, h, i] (bs, d) = beta * o + sum over entries e of output block (h, i) of
 * P[n, k[e]] @ b[n, h, other[e]] (transposed == 0) or P[n, k[e]]^T @ b[...] (transposed == 1);
 * p (N, nnz, bs, bs), b (N, H, Tin, d), o (N, H, Tout, d), ptr over H * Tout / bs blocks.
 * work: bs_threads() * bs * bs scratch (each thread's transposed block of P; read only when
 * transposed). */
void bs_dsd(const real *p, const real *b, real *o, int64_t N, int64_t H, int64_t Tin,
            int64_t Tout, int64_t d, int64_t bs, int64_t nnz, const int32_t *ptr,
            const int32_t *kidx, const int32_t *other, int transposed, real beta, real *work);

/* p = softmax(scale * s) along each row of blocks (rows = H * R rows of blocks, row_ptr); with
 * causal, entry (r, c) of block k is hidden when col[k]*bs + c > row[k]*bs + r + off
 * (off = (C - R) * bs).  Hidden entries and rows with nothing visible are 0. */
void bs_softmax(const real *s, real *p, int64_t N, int64_t rows, int64_t R, int64_t C,
                int64_t bs, int64_t nnz, const int32_t *ptr, const int32_t *brow,
                const int32_t *bcol, real scale, int causal);

/* ds = scale * p * (dp - rowsum(dp * p)) over the rows of bs_softmax; ds may be dp. */
void bs_softmax_bprop(const real *p, const real *dp, real *ds, int64_t N, int64_t rows,
                      int64_t bs, int64_t nnz, const int32_t *ptr, real scale);
