/* Softmax over the last axis of (M, K), and softmax fused with cross-entropy. */

/* out = exp(x - max) / sum(exp(x - max)) per row. */
void softmax_rows(const real *x, real *out, int64_t M, int64_t K);

/* probs = softmax(logits) per row, grad = scale * (probs - targets) (targets one-hot or soft);
 * returns the summed loss -sum(targets * log(probs)), accumulated in double. */
double softmax_cross_entropy(const real *logits, const real *targets, real *probs, real *grad,
                             int64_t M, int64_t K, double scale);

/* The same with class-index targets: idx (M,) int32, row m's target class idx[m] in [0, K).
 * probs = softmax(logits), grad = scale * (probs - onehot(idx)) and the returned loss
 * -sum log(probs[m, idx[m]]) are bit-identical to softmax_cross_entropy with the one-hot
 * targets.  Returns NaN having written nothing when an index is out of range; *bad is then
 * the first such row (else -1). */
double softmax_cross_entropy_index(const real *logits, const int32_t *idx, real *probs,
                                   real *grad, int64_t M, int64_t K, double scale,
                                   int64_t *bad);
