/* Batch norm over the rows of (M, C) (an NHWC batch viewed as (N*H*W, C)), and layer norm
 * over the last axis of (M, D).  Per-channel vectors are (C,) or (D,); statistics are
 * accumulated in double.
 *
 * The kernels that sum over the rows take `work`, the caller's scratch of norm_work_size(M, C)
 * doubles (C: D for layer norm); its contents on entry do not matter and the kernels allocate
 * nothing.  With B = min(max(M, 1), 32) row blocks (nl_blocks in common.h) it holds 2 C
 * doubles (the column sums), 3 C `real`s rounded up to whole doubles (batchnorm_bprop's
 * per-channel factors), then the block sums over 2 C columns: 2 B C doubles, then a run sum
 * of 2 C `real`s for each block (layernorm_bprop_bf16's).  In all, for float about
 * 28 C + 24 B C bytes, for double 40 C + 32 B C. */
int64_t norm_work_size(int64_t M, int64_t C);

/* Training mode: normalize with the batch statistics; mean, invstd get them and
 * running_x = momentum * running_x + (1 - momentum) * batch_x (running_var takes the unbiased
 * variance).  xhat = (x - mean) * invstd, y = gamma * xhat + beta, then y = max(y, 0) when
 * relu is nonzero (the following ReLU fused). */
void batchnorm_fprop_train(const real *x, const real *gamma, const real *beta, real *y,
                           real *xhat, real *mean, real *invstd, real *running_mean,
                           real *running_var, double *work, int64_t M, int64_t C, double eps,
                           double momentum, int relu);

/* batchnorm_fprop_train and batchnorm_bprop on bfloat16 operands (uint16 bit patterns, every
 * operand bf16), the arithmetic in `real` (the float32 variant's): rows widened as they are
 * read, the sums over the rows in double in fixed row blocks, the normalization with the
 * unrounded float statistics, each written element (y, xhat, mean, invstd, running_*, dx,
 * dgamma, dbeta) rounded to nearest even once (batchnorm_bf16.h); no float32 copy of an
 * operand is made.  work as the float kernels' (norm_work_size). */
void batchnorm_fprop_train_bf16(const uint16_t *x, const uint16_t *gamma, const uint16_t *beta,
                                uint16_t *y, uint16_t *xhat, uint16_t *mean, uint16_t *invstd,
                                uint16_t *running_mean, uint16_t *running_var, double *work,
                                int64_t M, int64_t C, double eps, double momentum, int relu);
void batchnorm_bprop_bf16(const uint16_t *dy, const uint16_t *xhat, const uint16_t *invstd,
                          const uint16_t *gamma, uint16_t *dx, uint16_t *dgamma,
                          uint16_t *dbeta, double *work, int64_t M, int64_t C, double beta_acc,
                          const uint16_t *relu_y);

/* Inference: the same with mean = running_mean, invstd = 1 / sqrt(running_var + eps). */
void batchnorm_fprop_infer(const real *x, const real *gamma, const real *beta, real *y,
                           real *xhat, real *mean, real *invstd, const real *running_mean,
                           const real *running_var, int64_t M, int64_t C, double eps,
                           int relu);

/* The batch statistics of synchronised batch norm, in double: mean[c] and
 * m2[c] = sum over rows of (x - mean)^2, from sums shifted by row 0 (as batchnorm_fprop_train
 * takes them); (C,) each. */
void batchnorm_moments(const real *x, int64_t M, int64_t C, double *mean, double *m2,
                       double *work);

/* Normalize with given statistics, as batchnorm_fprop_train does with its own:
 * xhat = (x - mean) * invstd, y = gamma * xhat + beta, then y = max(y, 0) when relu. */
void batchnorm_apply(const real *x, const real *gamma, const real *beta, real *y, real *xhat,
                     const real *mean, const real *invstd, int64_t M, int64_t C, int relu);

/* dx = beta_acc * dx + gamma * invstd / M * (M * dy - sum(dy) - xhat * sum(dy * xhat));
 * dgamma += sum(dy * xhat), dbeta += sum(dy) (sums over the rows).  With relu_y (the fused
 * fprop's output, or NULL) dy counts only where relu_y > 0: the ReLU's backward fused. */
void batchnorm_bprop(const real *dy, const real *xhat, const real *invstd, const real *gamma,
                     real *dx, real *dgamma, real *dbeta, double *work, int64_t M, int64_t C,
                     double beta_acc, const real *relu_y);

/* Per row: xhat = (x - mean) * invstd, y = gamma * xhat + beta; invstd is (M,).  With
 * `residual` and `total` (M, D) (or both NULL): total = x + residual is written and normalized
 * in its place (a residual add joined in the same pass; total shares no memory with the
 * others). */
void layernorm_fprop(const real *x, const real *gamma, const real *beta, real *y, real *xhat,
                     real *invstd, const real *residual, real *total, int64_t M, int64_t D,
                     double eps);

/* dx = invstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dy * gamma (means per row);
 * dgamma += sum over rows of dy * xhat, dbeta += sum over rows of dy.  With `residual` (M, D)
 * (or NULL), dx = residual + that: a residual branch's gradient joined in the same pass
 * (residual shares no memory with dy, xhat or dx). */
void layernorm_bprop(const real *dy, const real *xhat, const real *invstd, const real *gamma,
                     const real *residual, real *dx, real *dgamma, real *dbeta, double *work,
                     int64_t M, int64_t D);

/* layernorm_fprop and layernorm_bprop with every operand as bfloat16 bits (uint16): each row
 * is widened into stack buffers (no float32 copy of a tensor is made), the sums are in double
 * (layernorm_fprop_bf16's mean and variance in one pass, shifted by the row's first element),
 * the written values are rounded to nearest even: invstd after y and xhat used it unrounded;
 * y and xhat come from the unrounded x + residual, total is its rounding.
 * layernorm_bprop_bf16 sums dgamma and dbeta over runs of 32 rows in float, the runs in
 * double in nl_blocks(M) fixed row blocks (the same bits on any number of threads), in
 * norm_work_size(M, D)'s run and block sums, in the same pass over the rows as dx, and adds
 * each total to the widened dgamma / dbeta, rounding once. */
void layernorm_fprop_bf16(const uint16_t *x, const uint16_t *gamma, const uint16_t *beta,
                          uint16_t *y, uint16_t *xhat, uint16_t *invstd,
                          const uint16_t *residual, uint16_t *total, int64_t M, int64_t D,
                          double eps);
void layernorm_bprop_bf16(const uint16_t *dy, const uint16_t *xhat, const uint16_t *invstd,
                          const uint16_t *gamma, const uint16_t *residual, uint16_t *dx,
                          uint16_t *dgamma, uint16_t *dbeta, double *work, int64_t M,
                          int64_t D);
