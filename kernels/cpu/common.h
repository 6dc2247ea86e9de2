/* Shared by every CPU kernel source.
 *
 * The element type `real` is the DTYPE define (float or double; the build passes -DDTYPE=...),
 * and <tgmath.h> makes sqrt, exp, ... pick the float or double function to match it.
 * Accumulations over many elements (sums, statistics, losses) are done in double.
 * Loops run on OpenMP threads once they are big enough to repay starting a team.
 */
#ifndef NEONLITE_COMMON_H
#define NEONLITE_COMMON_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <tgmath.h>

#ifndef DTYPE
#error "compile with -DDTYPE=float or -DDTYPE=double"
#endif
typedef DTYPE real;

/* Loops over fewer elements than this run on one thread. */
#define NL_PARALLEL_MIN 32768

/* Sums over many rows add up runs of this many rows in `real` before a run's sums enter the
 * double totals: the vector work of float sums, and a float sum of 32 terms loses at most
 * about 5 of its 24 bits (column sums of GELU's bias, the op-tree's, layer norm's and
 * RMSNorm's bf16 backward). */
#define NL_RUN 32

/* Elementwise loops hand out their iterations dynamically, about NL_GRAIN elements at a time,
 * so that a thread the OS has descheduled (the machine is shared with BLAS threads and other
 * processes) delays the loop by one grain, not by its whole static share. */
#define NL_GRAIN 16384

/* Iterations per dynamic chunk for a loop whose iterations touch `per_item` elements each. */
static inline int nl_grain(int64_t per_item)
{
    const int64_t n = per_item > 0 ? NL_GRAIN / per_item : NL_GRAIN;
    return n < 1 ? 1 : (int)n;
}

/* The half-open slice [*lo, *hi) of n items that part `part` of `nparts` covers. */
static inline void nl_split(int64_t n, int64_t part, int64_t nparts, int64_t *lo, int64_t *hi)
{
    const int64_t base = n / nparts, extra = n % nparts;
    *lo = part * base + (part < extra ? part : extra);
    *hi = *lo + base + (part < extra ? 1 : 0);
}

/* Sums over many rows cut the rows into a fixed number of blocks (fewer when there are fewer
 * rows), each summed into its own slot; the slots are added in block order.  The result then
 * depends neither on the number of threads nor on which thread took which block, and threads
 * can take blocks dynamically. */
#define NL_BLOCKS 32
static inline int64_t nl_blocks(int64_t rows)
{
    return rows < 1 ? 1 : (rows < NL_BLOCKS ? rows : NL_BLOCKS);
}

/* The work array such a sum of `cols` columns over `rows` rows takes from its caller, in
 * doubles: the blocks' double partial sums (nl_blocks(rows) * cols of them), then as many
 * `real` sums of short runs of rows (rounded up to whole doubles).  It depends on `rows` only
 * through nl_blocks(rows).  Block b's partial sums start at work + b * cols; the run sums
 * start at nl_block_sums_runs(work, rows, cols), block b's at + b * cols. */
static inline int64_t nl_block_sums_size(int64_t rows, int64_t cols)
{
    const int64_t n = nl_blocks(rows) * cols;
    return n + (n * (int64_t)sizeof(real) + (int64_t)sizeof(double) - 1)
               / (int64_t)sizeof(double);
}

static inline real *nl_block_sums_runs(double *work, int64_t rows, int64_t cols)
{
    return (real *)(work + nl_blocks(rows) * cols);
}

/* dst = beta * dst for n elements (beta == 0 writes zeros, so old NaNs do not survive). */
static inline void nl_scale(real *dst, int64_t n, real beta)
{
    if (beta == 0) {
        memset(dst, 0, (size_t)n * sizeof(real));
    } else if (beta != 1) {
        for (int64_t i = 0; i < n; i++)
            dst[i] *= beta;
    }
}

/* A convolution's epilogue on n rows of K channels (row-major), applied while the rows are in
 * cache: o[i][k] += bias[k] (skipped when bias is NULL), then o = max(o, 0) when relu.  The
 * ReLU keeps a NaN (so a loss scaler still sees it), as numpy's maximum does.  One branch-free
 * loop per case, so each vectorizes. */
static inline void nl_bias_relu(real *o, int64_t n, int64_t K, const real *bias, int relu)
{
    for (int64_t i = 0; i < n; i++) {
        real *row = o + i * K;
        if (bias && relu) {
            for (int64_t k = 0; k < K; k++) {
                const real v = row[k] + bias[k];
                row[k] = v < 0 ? 0 : v;
            }
        } else if (bias) {
            for (int64_t k = 0; k < K; k++)
                row[k] += bias[k];
        } else if (relu) {
            for (int64_t k = 0; k < K; k++)
                row[k] = row[k] < 0 ? 0 : row[k];
        }
    }
}

/* exp for float in straight-line code the compiler vectorizes (libm's expf is a call per
 * element): Cody-Waite reduction x = n ln2 + r and a degree-6 polynomial (Cephes), relative
 * error below 2e-7; underflow gives 0, overflow inf, NaN stays NaN.  Double uses libm. */
static inline float nl_expf_mantissa(float c, float *n_out)
{
    /* exp(c) = y * 2^n for c in range: returns y, stores n (a whole number) in *n_out. */
    const float n = rintf(c * 1.44269504088896341f);
    const float r = (c - n * 0.693359375f) - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    *n_out = n;
    return p * r * r + r + 1.0f;
}

static inline float nl_expf(float x)
{
    const float c = x < -87.33654f ? -87.33654f : (x > 88.72283f ? 88.72283f : x);
    float n;
    const float y = nl_expf_mantissa(c, &n);
    /* 2^n as two factors 2^h * 2^(n-h), each a normal float for every n in [-126, 128]. */
    const int32_t k = (int32_t)n, h = k / 2;
    union { float f; int32_t i; } s1, s2;
    s1.i = (h + 127) << 23;
    s2.i = (k - h + 127) << 23;
    const float v = y * s1.f * s2.f;
    return x != x ? x : (x < -87.33654f ? 0.0f : (x > 88.72283f ? INFINITY : v));
}
#define NL_EXP(x) _Generic((x), float: nl_expf, default: exp)(x)

/* nl_expf for an x whose exp is a normal float (about -87 < x < 88), where the caller knows
 * it is: no clamps or special values and 2^n as one factor, so the same values in fewer
 * instructions. */
static inline float nl_expf_normal(float x)
{
    float n;
    const float y = nl_expf_mantissa(x, &n);
    union { float f; int32_t i; } scale;
    scale.i = ((int32_t)n + 127) << 23;
    return y * scale.f;
}

/* erf for float in straight-line code the compiler vectorizes: |x| < 0.875 by an odd
 * polynomial x P(x^2), else 1 - exp(Q(|x|)) with Q fitted to log(erfc) on [0.875, 4] (erf is 1
 * in float past 4); both are computed and one selected, so there is no branch.  Absolute error
 * below 1.5e-7 against the double erf (tests/test_gelu_kernels.py).  Double uses libm. */
static inline float nl_erf32(float x)
{
    const float a = fabsf(x), s = a * a, c = a < 4.0f ? a : 4.0f;
    float p = -6.222422817e-04f;
    p = p * s + 5.035872106e-03f;
    p = p * s - 2.679395489e-02f;
    p = p * s + 1.128252447e-01f;
    p = p * s - 3.761255741e-01f;
    p = p * s + 1.128379107e+00f;
    float q = 1.602486350e-06f;
    q = q * c - 4.535450353e-05f;
    q = q * c + 5.907145678e-04f;
    q = q * c - 4.730278626e-03f;
    q = q * c + 2.633552998e-02f;
    q = q * c - 1.099251658e-01f;
    q = q * c - 6.319953203e-01f;
    q = q * c - 1.130131483e+00f;
    q = q * c + 2.942720894e-04f;
    /* q lies in [-18, 0.0003] for c in [0, 4]: nl_expf_normal's domain. */
    const float r = a < 0.875f ? a * p : 1.0f - nl_expf_normal(q);
    return x != x ? x : copysignf(r, x);
}
#define NL_ERF_REAL(x) _Generic((x), float: nl_erf32, default: erf)(x)

/* A row-major CBLAS ?gemm (MKL's cblas_sgemm / cblas_dgemm, whose address the backend passes
 * as an int64_t), for kernels that call GEMMs from their own OpenMP threads. */
typedef void (*nl_gemm)(int layout, int trans_a, int trans_b, int m, int n, int k, real alpha,
                        const real *a, int lda, const real *b, int ldb, real beta, real *c,
                        int ldc);
enum { NL_ROW_MAJOR = 101, NL_NO_TRANS = 111, NL_TRANS = 112 };
/* MKL's packed GEMMs: cblas_?gemm_pack (B packed once) and cblas_?gemm_compute (its transb
 * NL_PACKED), for a product by the same matrix many times. */
typedef void (*nl_gemm_pack)(int layout, int identifier, int trans, int m, int n, int k,
                             real alpha, const real *src, int ld, real *dest);
typedef void (*nl_gemm_compute)(int layout, int trans_a, int trans_b, int m, int n, int k,
                                const real *a, int lda, const real *b, int ldb, real beta,
                                real *c, int ldc);
enum { NL_PACKED = 151, NL_B_MATRIX = 162 };

#endif
