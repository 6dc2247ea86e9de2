/* Convolution patch gathering (im2col) and its scatter-add (col2im) on NHWC images; BLAS
 * GEMMs do the arithmetic.  (Direct kernels for filters of few taps were measured slower than
 * patches + a single-threaded GEMM, even for a 5x5 filter on one channel.)
 *
 * Input x (N, H, W, C); output (N, P, Q, K); filters (R, S, C, K).  A patch matrix has one row
 * per output pixel (n, p, q) and R*S*C columns ordered (r, s, c), so that
 * output (N*P*Q, K) = cols @ filters (R*S*C, K).  Both functions handle the images
 * n0 <= n < n1 only, with row 0 of `cols` belonging to image n0, so a caller can work through
 * a large batch in chunks whose patch matrix stays in cache.
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
} conv_geom;

/* cols ((n1-n0)*P*Q, R*S*C) = the patches of x; taps in the padding read as zero. */
void im2col(const real *x, real *cols, const conv_geom *g, int64_t n0, int64_t n1);

/* dx[n0:n1] = beta * dx[n0:n1] + the sum, over every patch row, of its entries added back to
 * the input pixels they were gathered from (entries of padding taps are dropped). */
void col2im(const real *cols, real *dx, const conv_geom *g, int64_t n0, int64_t n1, real beta);
