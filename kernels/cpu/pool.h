/* Max and average pooling on NHWC images: x (N, H, W, C) -> y (N, P, Q, C).
 *
 * Window (p, q) covers rows p*str_h - pad_h .. + R-1 and columns q*str_w - pad_w .. + S-1;
 * windows may overlap.  Padded positions never win a max and are not counted in an average.
 * Max pooling records, per output element, the winning input position h*W + w (int32) in
 * `argmax` (N, P, Q, C); ties go to the first tap in (r, s) order.
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
} pool_geom;

void maxpool_fprop(const real *x, real *y, int32_t *argmax, const pool_geom *g);

/* dx = beta * dx + e routed to the positions recorded by maxpool_fprop. */
void maxpool_bprop(const real *e, const int32_t *argmax, real *dx, const pool_geom *g,
                   real beta);

void avgpool_fprop(const real *x, real *y, const pool_geom *g);

/* dx = beta * dx + e / (window count) spread over each window's unpadded positions. */
void avgpool_bprop(const real *e, real *dx, const pool_geom *g, real beta);

/* The four passes on bfloat16 operands (uint16 bit patterns: x, y, e, dx), the arithmetic in
 * `real` (the float32 variant's), no float32 copy of an operand made: a max and its argmax
 * compare widened values and copy the winner's bits (exact); an average sums a window in
 * float32 and rounds once (to nearest even); the backward passes of non-overlapping windows
 * write each input element once, round(beta * dx + its gradient) (a routed max gradient with
 * beta 0 is its bits, exactly); those of overlapping windows stage one image per thread in
 * float32 (beta * dx, then every window's gradient added) and round it once.  The results are
 * those of widening the operands, running the float32 passes and narrowing the written ones.
 * The backward passes' work (nwork images of H*W*C reals, nwork at most pool_threads()) is
 * read only where pool_bf16_overlapping(g) (else it may be NULL). */
int pool_bf16_overlapping(const pool_geom *g);
int pool_threads(void);
void maxpool_fprop_bf16(const uint16_t *x, uint16_t *y, int32_t *argmax, const pool_geom *g);
void maxpool_bprop_bf16(const uint16_t *e, const int32_t *argmax, uint16_t *dx,
                        const pool_geom *g, real beta, real *work, int64_t nwork);
void avgpool_fprop_bf16(const uint16_t *x, uint16_t *y, const pool_geom *g);
void avgpool_bprop_bf16(const uint16_t *e, uint16_t *dx, const pool_geom *g, real beta,
                        real *work, int64_t nwork);
