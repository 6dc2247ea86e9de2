/* GELU over the rows of (M, D), with an optional bias (D,) added first, and its gradient with
 * the bias gradient summed over the rows.  `approximate` 0: the exact x * Phi(x) (erf form);
 * 1: the tanh form 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). */

/* pre = x + bias (bias NULL: pre = x; pre may be x), y = gelu(pre).  pre may be NULL: y =
 * gelu(x + bias) (or gelu(x) without a bias), the sum not kept (inference). */
void gelu_fprop(const real *x, const real *bias, real *pre, real *y, int64_t M, int64_t D,
                int approximate);

/* dx = dy * gelu'(pre) (dx may be dy); y = gelu(pre) from the forward pass, or NULL (the erf
 * form then recomputes Phi(pre) = y / pre; the tanh form ignores it); dbias (D,) += sum over
 * the rows of dx unless NULL, accumulated in double in fixed row blocks (the same result on any
 * number of threads).
 *
 * work: the caller's scratch for the dbias sums (read only when dbias is given; may be NULL
 * otherwise), gelu_bprop_work_size(M, D) doubles, i.e. with B = min(max(M, 1), 32) row blocks
 * (nl_blocks in common.h): B * D doubles (each block's partial sums of dx) followed by B * D
 * `real`s (each block's sums of runs of 32 rows), that is B * D * (8 + sizeof(real)) bytes
 * (float: 12 B D, double: 16 B D) rounded up to a multiple of 8 (nl_block_sums_size in
 * common.h).  Its contents on entry do not matter; gelu_bprop allocates nothing. */
void gelu_bprop(const real *pre, const real *y, const real *dy, real *dx, real *dbias,
                double *work, int64_t M, int64_t D, int approximate);

/* The length of gelu_bprop's `work` for (M, D) rows, in doubles (see above). */
int64_t gelu_bprop_work_size(int64_t M, int64_t D);

/* gelu_fprop and gelu_bprop on bfloat16 operands (uint16 bit patterns; every operand given
 * is bf16), the arithmetic in `real` (the float32 variant's): each row is one pass in which
 * every element is widened in registers, run through the same arithmetic as the float rows
 * and narrowed (round to nearest even), so no float32 copy of a tensor is made.  The results
 * are those of widening every operand, running gelu_fprop / gelu_bprop and narrowing the
 * written ones (pre is the rounded x + bias, y is computed from the unrounded one; dbias gets
 * the sum of the unrounded dx, added to its widened value and rounded once).
 * gelu_bprop_bf16's work is gelu_bprop's (gelu_bprop_work_size). */
void gelu_fprop_bf16(const uint16_t *x, const uint16_t *bias, uint16_t *pre, uint16_t *y,
                     int64_t M, int64_t D, int approximate);
void gelu_bprop_bf16(const uint16_t *pre, const uint16_t *y, const uint16_t *dy, uint16_t *dx,
                     uint16_t *dbias, double *work, int64_t M, int64_t D, int approximate);

/* y = erf(x) elementwise with the function the erf-form GELU uses (checks its accuracy). */
void erf_values(const real *x, real *y, int64_t n);
