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
