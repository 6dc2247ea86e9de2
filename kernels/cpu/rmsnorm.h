/* RMSNorm over the last axis of rows (M, D) (the norm of Llama-style transformers; no mean
 * subtracted, no shift):  rstd = 1 / sqrt(mean(x^2) + eps) per row (M,),
 * xhat = x * rstd, y = gamma * xhat.  Sums in double.  backends/reference/norm.py is the
 * reference. */

/* With `residual` and `total` (M, D) (or both NULL): total = x + residual is written and
 * normalized in its place (a residual add joined in the same pass; total shares no memory with
 * the others, or is x itself).  xhat may be NULL (not kept: inference). */
void rmsnorm_fprop(const real *x, const real *gamma, real *y, real *xhat, real *rstd,
                   const real *residual, real *total, int64_t M, int64_t D, double eps);

/* dx = rstd * (g - xhat * mean(g * xhat)) with g = dy * gamma (mean per row), plus `residual`
 * (M, D) when it is not NULL (a residual branch's gradient joined in the same pass; it shares
 * no memory with dy, xhat or dx); dgamma (D,) += the sum over rows of dy * xhat, each column
 * summed in row order (the same bits on any number of threads). */
void rmsnorm_bprop(const real *dy, const real *xhat, const real *rstd, const real *gamma,
                   real *dx, real *dgamma, const real *residual, int64_t M, int64_t D);

/* rmsnorm_fprop and rmsnorm_bprop with every operand as bfloat16 bits (uint16): each row
 * widened into stack buffers (no float32 copy of a tensor is made), sums in double, written
 * values rounded to nearest even (rstd after y and xhat used it unrounded); y and xhat come
 * from the unrounded x + residual, total is its rounding (total may be x).  dgamma's columns
 * are summed in row order, runs of 32 rows in float and the runs in double, each total added
 * to the widened dgamma and rounded once. */
void rmsnorm_fprop_bf16(const uint16_t *x, const uint16_t *gamma, uint16_t *y,
                        uint16_t *xhat, uint16_t *rstd, const uint16_t *residual,
                        uint16_t *total, int64_t M, int64_t D, double eps);
void rmsnorm_bprop_bf16(const uint16_t *dy, const uint16_t *xhat, const uint16_t *rstd,
                        const uint16_t *gamma, uint16_t *dx, uint16_t *dgamma,
                        const uint16_t *residual, int64_t M, int64_t D);
