/* Rows of a table (V, D) by index: the embedding look-up and its gradient.  `ids` are n row
 * numbers, already checked to lie in [0, V). */

/* out[i] = table[ids[i]] for i < n; out is (n, D). */
void take_rows(const real *table, const int64_t *ids, real *out, int64_t n, int64_t D);

/* grad[ids[i]] += rows[i] for i = 0, 1, ..., n - 1 in that order (so repeated ids are summed
 * in a fixed order on any number of threads: threads split the D columns, not the rows). */
void scatter_add_rows(real *grad, const int64_t *ids, const real *rows, int64_t n, int64_t D);
