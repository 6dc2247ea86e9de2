/* GELU over the rows of (M, D), with an optional bias (D,) added first, and its gradient with
 * the bias gradient summed over the rows.  `approximate` 0: the exact x * Phi(x) (erf form);
 * 1: the tanh form 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). */

/* pre = x + bias (bias NULL: pre = x; pre may be x), y = gelu(pre). */
void gelu_fprop(const real *x, const real *bias, real *pre, real *y, int64_t M, int64_t D,
                int approximate);

/* dx = dy * gelu'(pre) (dx may be dy); y = gelu(pre) from the forward pass, or NULL (the erf
 * form then recomputes Phi(pre) = y / pre; the tanh form ignores it); dbias (D,) += sum over
 * the rows of dx unless NULL, accumulated in double in fixed row blocks (the same result on any
 * number of threads). */
void gelu_bprop(const real *pre, const real *y, const real *dy, real *dx, real *dbias, int64_t M,
                int64_t D, int approximate);

/* y = erf(x) elementwise with the function the erf-form GELU uses (checks its accuracy). */
void erf_values(const real *x, real *y, int64_t n);
