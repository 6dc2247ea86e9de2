/* Convolution on NHWC images: patch gathering (im2col) and its scatter-add (col2im) for BLAS
 * GEMMs over the whole patch matrix, and tiled passes that fuse the two with the GEMMs.
 *
 * Input x (N, H, W, C); output (N, P, Q, K); filters (R, S, C, K).  A patch matrix has one row
 * per output pixel (n, p, q) and R*S*C columns ordered (r, s, c), so that
 * output (N*P*Q, K) = cols @ filters (R*S*C, K).  im2col and col2im handle the images
 * n0 <= n < n1 only, with row 0 of `cols` belonging to image n0, so a caller can work through
 * a large batch in chunks.
 *
 * The tiled passes (conv_*_tiled) never build the whole patch matrix: each OpenMP thread
 * gathers `tile` output rows (n, p) at a time, tile * Q patch rows, into its own slice of
 * `work` (nwork slices of tile * Q * R*S*C elements) and multiplies them there with `gemm`, the
 * address of a row-major CBLAS ?gemm (cblas_sgemm for float, cblas_dgemm for double) that runs
 * on the calling thread when called inside an OpenMP parallel region (MKL does).  The patches
 * then stay in the core's cache, and no thread waits on another inside a GEMM.  nwork is at
 * most conv_threads().  (Direct kernels for filters of few taps, e.g. 5x5 on one channel, were
 * measured slower than patches + GEMM.)
 */
#include "conv_geom.h"

/* cols ((n1-n0)*P*Q, R*S*C) = the patches of x; taps in the padding read as zero. */
void im2col(const real *x, real *cols, const conv_geom *g, int64_t n0, int64_t n1);

/* dx[n0:n1] = beta * dx[n0:n1] + the sum, over every patch row, of its entries added back to
 * the input pixels they were gathered from (entries of padding taps are dropped). */
void col2im(const real *cols, real *dx, const conv_geom *g, int64_t n0, int64_t n1, real beta);

/* The most threads an OpenMP parallel region of these kernels uses. */
int conv_threads(void);

/* o (N*P*Q, K) = patches(x) @ f (R*S*C, K), then the epilogue of nl_bias_relu (common.h:
 * + bias (K,) unless bias is NULL, then ReLU when relu) on each tile while it is in cache;
 * tiles handed out dynamically. */
void conv_fprop_tiled(const real *x, const real *f, real *o, const conv_geom *g, int64_t gemm,
                      real *work, int64_t nwork, int64_t tile, const real *bias, int relu);

/* o (rows, K) += bias (K,) (unless bias is NULL), then ReLU when relu: the epilogue of the
 * GEMM paths (1x1 filters, whole patch matrices), on OpenMP threads. */
void conv_bias_relu(real *o, int64_t rows, int64_t K, const real *bias, int relu);

/* The blocks of output rows a weight gradient (conv_update_tiled, conv_direct_update) sums
 * apart, from the shape alone (conv_update_blocks.h): its partials array holds that many
 * (R*S*C, K) arrays. */
int64_t conv_update_blocks(const conv_geom *g);

/* df (R*S*C, K) = beta * df + patches(x)^T @ e (N*P*Q, K).  Block b of the output rows
 * (conv_update_blocks) is summed into partials[b], `tile` rows per GEMM, the blocks handed out
 * dynamically; the partials are then added in block order, in double, so the result does not
 * depend on the number of threads. */
void conv_update_tiled(const real *x, const real *e, real *df, const conv_geom *g, int64_t gemm,
                       real *work, real *partials, int64_t nwork, int64_t tile, real beta);

/* dx (N, H, W, C) = beta * dx + the data gradient of e (N, P, Q, K) through f.  One thread
 * takes a whole image: e's rows times f^T, `tile` output rows at a time, added back into the
 * image (no two threads write the same image, so no atomics). */
void conv_bprop_tiled(const real *e, const real *f, real *dx, const conv_geom *g, int64_t gemm,
                      real *work, int64_t nwork, int64_t tile, real beta);

/* The tiled passes on bfloat16 operands (uint16 bit patterns: x, f, o, bias, e, df, dx), the
 * arithmetic in `real` (the float32 variant's, the GEMM cblas_sgemm): patches widened as they
 * are gathered, the filter (and bias) widened once a call into the head of work, a tile's rows
 * of e widened into the thread's staging; an output tile is computed into the staging, its
 * epilogue run there and rounded (to nearest even) into o once; the data gradient adds an
 * image's patches into a float image per thread (beta * dx widened, or zero) and rounds it
 * once; the weight gradient rounds df once, after its partials' sum.  No float32 copy of an
 * operand is made.  work holds conv_tiled_bf16_work_size(g, nwork, tile) reals; partials as
 * conv_update_tiled's. */
int64_t conv_tiled_bf16_work_size(const conv_geom *g, int64_t nwork, int64_t tile);
void conv_fprop_tiled_bf16(const uint16_t *x, const uint16_t *f, uint16_t *o,
                           const conv_geom *g, int64_t gemm, real *work, int64_t nwork,
                           int64_t tile, const uint16_t *bias, int relu);
void conv_update_tiled_bf16(const uint16_t *x, const uint16_t *e, uint16_t *df,
                            const conv_geom *g, int64_t gemm, real *work, real *partials,
                            int64_t nwork, int64_t tile, real beta);
void conv_bprop_tiled_bf16(const uint16_t *e, const uint16_t *f, uint16_t *dx,
                           const conv_geom *g, int64_t gemm, real *work, int64_t nwork,
                           int64_t tile, real beta);
