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
