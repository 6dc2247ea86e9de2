/* Softmax over the last axis of attention scores (B, Tq, Tk), with causal and key-padding
 * masks, and its gradient.  Rows are independent; each is one OpenMP work item. */

/* out = softmax(scale * x) per row, hidden keys 0: with `causal`, query i sees key j only when
 * j <= i + (Tk - Tq); with key_mask (N, Tk) (NULL: none; B a multiple of N), a zero hides key j
 * from the slices b with b / (B / N) == n.  A row with every key hidden is all zeros.  out may
 * be x. */
void attention_softmax_fprop(const real *x, real *out, int64_t B, int64_t Tq, int64_t Tk,
                             double scale, int causal, const real *key_mask, int64_t N);

/* dx = scale * y * (dy - sum(dy * y)) per row of (M, Tk) (the dot in double); dx may be dy. */
void attention_softmax_bprop(const real *y, const real *dy, real *dx, int64_t M, int64_t Tk,
                             double scale);
