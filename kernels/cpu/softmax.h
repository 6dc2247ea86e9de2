/* Softmax over the last axis of (M, K), and softmax fused with cross-entropy. */

/* out = exp(x - max) / sum(exp(x - max)) per row. */
void softmax_rows(const real *x, real *out, int64_t M, int64_t K);

/* probs = softmax(logits) per row, grad = scale * (probs - targets) (targets one-hot or soft);
 * returns the summed loss -sum(targets * log(probs)), accumulated in double. */
double softmax_cross_entropy(const real *logits, const real *targets, real *probs, real *grad,
                             int64_t M, int64_t K, double scale);
