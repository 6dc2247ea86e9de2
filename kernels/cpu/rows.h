/* Rows of a table (V, D) by index: the embedding look-up and its gradient.  `ids` are n row
 * numbers, already checked to lie in [0, V). */

/* out[i] = table[ids[i]] for i < n; out is (n, D). */
void take_rows(const real *table, const int64_t *ids, real *out, int64_t n, int64_t D);

/* grad[ids[i]] += rows[i] for i = 0, 1, ..., n - 1 in that order (so repeated ids are summed
 * in a fixed order on any number of threads: threads split the D columns, not the rows). */
void scatter_add_rows(real *grad, const int64_t *ids, const real *rows, int64_t n, int64_t D);

/* Rows of D contiguous elements between two strided 3-D grids of rows (a transposing copy,
 * e.g. (N, T, H, dh) <-> (N, H, T, dh)): for a < A, b < B, c < C,
 * dst[a*da + b*db + c*dc + :D] = src[a*sa + b*sb + c*sc + :D] (strides in elements). */
void copy_rows(const real *src, int64_t sa, int64_t sb, int64_t sc, real *dst, int64_t da,
               int64_t db, int64_t dc, int64_t A, int64_t B, int64_t C, int64_t D);

/* out[m * C + c] = x[m * C + c] + row[c] for m < M, c < C: a bias (or any row of C elements,
 * e.g. a positional-embedding block) added to every row; out may be x. */
void add_row(const real *x, const real *row, real *out, int64_t M, int64_t C);

/* The same on bfloat16 bits (uint16): out = x + row summed in float, rounded to nearest even
 * (as the op-tree machine's bf16 store); out may be x. */
void add_row_bf16(const uint16_t *x, const uint16_t *row, uint16_t *out, int64_t M, int64_t C);

/* grad[ids[i]] += rows[i] on bfloat16 bits (grad (V, D), rows (n, D), ids checked to lie in
 * [0, V)): each id's rows are added to its widened grad row in float in the order
 * i = 0, 1, ... and the sum rounded once, as widening grad and rows, scatter_add_rows and
 * narrowing give, bit for bit, on any number of threads (threads take whole ids).  work:
 * scatter_add_rows_bf16_work_size(n, V) int64 of scratch (the ids' stable order, by a counting
 * sort); nothing is allocated. */
void scatter_add_rows_bf16(uint16_t *grad, const int64_t *ids, const uint16_t *rows,
                           int64_t *work, int64_t n, int64_t D, int64_t V);
int64_t scatter_add_rows_bf16_work_size(int64_t n, int64_t V);

/* A one-row product on bfloat16 bits (a bias gradient ones @ dY, a batch sum): out (K,) =
 * alpha * sum over m < M of w[m] * B[m, :] + beta * out (out not read where beta is 0), w (M,)
 * and B (M, K) (rows ldb elements apart), the products and sums in float: in row order within
 * fixed blocks of rows, the blocks' sums added in block order (the blocks depend on M and K
 * only, so the bits are the same on any number of threads: threads take the blocks and the
 * chunks of columns), out rounded to nearest even. */
void row_combination_bf16(const uint16_t *w, const uint16_t *B, int64_t ldb, int64_t M,
                          int64_t K, double alpha, double beta, uint16_t *out);
