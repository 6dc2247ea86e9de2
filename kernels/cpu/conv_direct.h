/* Direct convolution on NHWC images, for the shapes where it beats patches + GEMM (few input
 * channels: a 5x5 filter on one channel makes a patch matrix 25 times the input for a GEMM
 * whose inner dimension is only 25).
 *
 * o (N, P, Q, K) = beta * o + conv(x (N, H, W, C), f (R, S, C, K)) with padding, strides and
 * dilation as in conv.h.  Threads take output rows (whole images, or parts of images when
 * there are fewer than two images per thread, so a batch of one uses every core); a thread
 * copies the image of its rows into its slice of `work` (nwork slices of
 * (H + 2*pad_h) * (W + 2*pad_w) * C elements) with zero borders, then computes each output
 * pixel block (a few pixels times a few vector registers of output channels) in registers
 * over all R*S*C taps.  Needs K to be a multiple of the vector width,
 * conv_direct_width() elements (64 bytes with AVX-512, else 32).
 */
#include "conv_geom.h"

int conv_direct_width(void);

/* The epilogue of nl_bias_relu (common.h: + bias (K,) unless bias is NULL, then ReLU when
 * relu) is applied to each output row right after it is computed. */
void conv_direct(const real *x, const real *f, real *o, const conv_geom *g, real *work,
                 int64_t nwork, real beta, const real *bias, int relu);

/* df (R, S, C, K) = beta * df + the weight gradient of x (N, H, W, C) and the output gradient
 * e (N, P, Q, K).  The N*P output rows are cut into the fixed blocks of
 * conv_update_blocks (conv.h: from the shape alone), which threads take dynamically (a
 * descheduled thread holds up one block, not half the work); block b sums into partials[b]
 * ((R*S*C, K) each) and the partials are added in block order, in double, so the result does
 * not depend on nwork. */
void conv_direct_update(const real *x, const real *e, real *df, const conv_geom *g,
                        real *work, real *partials, int64_t nwork, real beta);

/* conv_direct and conv_direct_update on bfloat16 operands (uint16 bit patterns: x, f, o,
 * bias, e, df), the arithmetic in `real` (the float32 variant's): each image is widened while
 * it is padded into the thread's slice of work, f and bias are widened once a call into the
 * head of work, an output row is computed into a float32 staging row and rounded (to nearest
 * even) into o once, after beta * o and the epilogue; the update widens the rows of e a block
 * takes into a staging image and rounds df once, after its partials are summed.  No float32
 * copy of an operand is made.  work holds conv_direct_bf16_work_size(g, nwork) reals (the
 * larger of both passes' needs); partials as conv_direct_update's. */
int64_t conv_direct_bf16_work_size(const conv_geom *g, int64_t nwork);
void conv_direct_bf16(const uint16_t *x, const uint16_t *f, uint16_t *o, const conv_geom *g,
                      real *work, int64_t nwork, real beta, const uint16_t *bias, int relu);
void conv_direct_update_bf16(const uint16_t *x, const uint16_t *e, uint16_t *df,
                             const conv_geom *g, real *work, real *partials, int64_t nwork,
                             real beta);
