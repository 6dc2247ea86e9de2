/* One optimizer step over many parameters in one pass: the parameter arena's fused update,
 * and the arena's sums of squares (global-norm clipping) and finiteness check.
 *
 * The arena holds every parameter of one dtype in one contiguous buffer; its gradients and
 * each optimizer state in buffers of the same layout.  A segment is a run of elements
 * [offset, offset + size) of those buffers updated with the same settings.
 *
 * Every rule computes, element by element, exactly the operations (and roundings to `real`)
 * of the op-tree the optimizer's per-parameter update builds, in the same order, so the
 * results are bit-identical to it (the file is compiled without floating-point contraction).
 * With g the gradient element:
 *     g = g * scale                           (flags & NL_FUSED_SCALED: global-norm clipping)
 *     g = min(max(g, clip_low), clip_high)    (flags & NL_FUSED_CLIPPED: clipping by value)
 * then per segment (seg flags):
 *     d = w * decay_mul                       (NL_SEG_DECAY: decoupled weight decay)
 *     g = g + wdecay * d                      (NL_SEG_WDECAY: coupled L2; d = w without decay)
 * and the rule, with constants c[0..]:
 *   NL_RULE_SGD:       w = w - c0 * g                                   c0 = lr
 *   NL_RULE_MOMENTUM:  v = c1 * v - c0 * g;  w = w + v                  c1 = momentum
 *   NL_RULE_NESTEROV:  v = c1 * v - c0 * g;  w = (w + c1 * v) - c0 * g
 *   NL_RULE_ADAM:      m = c0 * m + c1 * g;  v = c2 * v + c3 * (g * g);
 *                      w = d - (c4 * m) / (sqrt(v) * c5 + c6)
 *                      (c0 = beta_1, c1 = 1 - beta_1, c2 = beta_2, c3 = 1 - beta_2,
 *                       c4 = lr / (1 - beta_1^t), c5 = 1 / sqrt(1 - beta_2^t), c6 = epsilon)
 *   NL_RULE_ADAM_BF16: the same with m and v stored as bfloat16 bit patterns (uint16, round to
 *                      nearest even, NaN -> 0x7FC0), computed in float (float arenas only)
 *   NL_RULE_RMSPROP:   s = c1 * s + c2 * (g * g);  w = w - (c0 * g) / (sqrt(s) + c3)
 *   NL_RULE_ADAGRAD:   s = s + g * g;  w = w - (c0 * g) / (sqrt(s) + c1)
 */
#define NL_RULE_SGD 0
#define NL_RULE_MOMENTUM 1
#define NL_RULE_NESTEROV 2
#define NL_RULE_ADAM 3
#define NL_RULE_ADAM_BF16 4
#define NL_RULE_RMSPROP 5
#define NL_RULE_ADAGRAD 6

#define NL_FUSED_SCALED 1
#define NL_FUSED_CLIPPED 2
#define NL_SEG_DECAY 1
#define NL_SEG_WDECAY 2

typedef struct {
    int64_t offset, size;
    int64_t flags;
} nl_segment;

typedef struct {
    int64_t rule, flags;
    double scale, clip_low, clip_high, decay_mul, wdecay;
    double c[8];
} nl_fused_rule;

/* Applies `rule` to every segment.  w, g: the arena's values and gradients; s0, s1: its first
 * and second state buffers (`real`, NULL when the rule has fewer); h0, h1: the bfloat16 state
 * buffers of NL_RULE_ADAM_BF16.  Returns 0 when every value it wrote (weights and states) is
 * finite, 1 when one is NaN or inf (the training loop's guard then needs no pass of its own),
 * or -1 for an unknown rule. */
int fused_update(const nl_fused_rule *rule, const nl_segment *segs, int64_t nseg, real *w,
                 const real *g, real *s0, real *s1, uint16_t *h0, uint16_t *h1);

/* A parameter whose gradient is read from, and whose value is also written to, bfloat16 bit
 * patterns outside the arena (MixedPrecision's float32 masters linked to the bf16 model):
 * its slot [offset, offset + size) of the arena, flags as a segment's, ordinal its place in
 * the parameter list (the stochastic rounding's key), g16 and w16 its bfloat16 gradient and
 * value (size elements each). */
typedef struct {
    int64_t offset, size, flags, ordinal;
    const uint16_t *g16;
    uint16_t *w16;
} nl_link;

/* How the bfloat16 copies are rounded: to nearest even, or stochastically with the random
 * bits of bf16_stochastic.h keyed by (seed, step, ordinal, element index). */
#define NL_ROUND_NEAREST 0
#define NL_ROUND_STOCHASTIC 1

typedef struct {
    int64_t mode;
    uint64_t seed, step;
} nl_rounding;

/* fused_update over linked parameters in one pass: each gradient element read from g16
 * (widened, exact), the rule applied to the arena's w and states as fused_update does (the
 * same operations, so bit-identical to it on the widened gradient), and the new weight
 * written to w16 rounded as `rounding` says, block by block while it is in L1.  Returns 0
 * when every value written (weights, states and the bf16 copies) is finite, 1 when one is
 * not, -1 for an unknown rule. */
int fused_update_linked(const nl_fused_rule *rule, const nl_link *links, int64_t nlinks,
                        real *w, real *s0, real *s1, uint16_t *h0, uint16_t *h1,
                        const nl_rounding *rounding);

/* g[offset + i] = g16[i] (exact) for every link. */
void link_widen_grads(const nl_link *links, int64_t nlinks, real *g);

/* w16[i] = w[offset + i] rounded as `rounding` says, for every link; 1 when every copy
 * written is finite, else 0. */
int link_narrow_values(const nl_link *links, int64_t nlinks, const real *w,
                       const nl_rounding *rounding);

/* out[k] = the sum of g16^2 over link k, accumulated in double. */
void link_sum_squares(const nl_link *links, int64_t nlinks, double *out);

/* out[k] = the sum of g^2 over segment k, accumulated in double. */
void segment_sum_squares(const real *g, const nl_segment *segs, int64_t nseg, double *out);

/* 1 when every element of x[0 .. n) is finite, else 0. */
int all_finite(const real *x, int64_t n);
