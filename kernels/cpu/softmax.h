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

/* softmax_rows, softmax_cross_entropy and softmax_cross_entropy_index on bfloat16 bits
 * (uint16: x, logits, one-hot or soft targets, probs, grad), the arithmetic that of the float
 * functions on the widened values (a row of at most 2048 classes widened once into stack
 * buffers, a longer one a chunk at a time with its exps computed again), the written values
 * rounded to nearest even: the probabilities and gradients of widening, running the float
 * function and narrowing, bit for bit, without a float copy of a tensor.  The loss is summed in
 * nl_blocks(M) fixed row blocks (the same bits on any number of threads). */
void softmax_rows_bf16(const uint16_t *x, uint16_t *out, int64_t M, int64_t K);
double softmax_cross_entropy_bf16(const uint16_t *logits, const uint16_t *targets,
                                  uint16_t *probs, uint16_t *grad, int64_t M, int64_t K,
                                  double scale);
double softmax_cross_entropy_index_bf16(const uint16_t *logits, const int32_t *idx,
                                        uint16_t *probs, uint16_t *grad, int64_t M, int64_t K,
                                        double scale, int64_t *bad);
