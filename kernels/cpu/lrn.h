/* Local response normalization across the channels of rows (M, C) (backends/numpy_lrn.py is
 * the reference): scale = k + alpha / depth * (sum of x^2 over channels c - depth/2 ..
 * c + (depth-1)/2), y = x scale^-beta.  Allocates nothing. */
void lrn_fprop(const real *x, real *y, real *scale, int64_t M, int64_t C, int depth,
               double alpha, double beta, double k);

/* dx = dy scale^-beta - 2 alpha beta / depth x sum_{j: i in window(j)} dy_j x_j
 * scale_j^(-beta-1); dx may not alias dy. */
void lrn_bprop(const real *x, const real *scale, const real *dy, real *dx, int64_t M,
               int64_t C, int depth, double alpha, double beta);
