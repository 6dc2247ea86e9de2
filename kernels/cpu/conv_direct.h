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
typedef struct {
    int64_t N;
    int64_t H;
    int64_t W;
    int64_t C;
    int64_t P;
    int64_t Q;
    int64_t R;
    int64_t S;
    int64_t pad_h;
    int64_t pad_w;
    int64_t str_h;
    int64_t str_w;
    int64_t dil_h;
    int64_t dil_w;
    int64_t K;
} direct_geom;

int conv_direct_width(void);

void conv_direct(const real *x, const real *f, real *o, const direct_geom *g, real *work,
                 int64_t nwork, real beta);

/* df (R, S, C, K) = beta * df + the weight gradient of x (N, H, W, C) and the output gradient
 * e (N, P, Q, K).  The N*P output rows are cut into 2 * nwork fixed blocks (fewer when there
 * are fewer rows), which threads take dynamically (a descheduled thread holds up one block,
 * not half the work); block b sums into partials[b] ((R*S*C, K) each, 2 * nwork of them) and
 * the partials are added in block order, so the result depends on nwork only. */
void conv_direct_update(const real *x, const real *e, real *df, const direct_geom *g,
                        real *work, real *partials, int64_t nwork, real beta);
