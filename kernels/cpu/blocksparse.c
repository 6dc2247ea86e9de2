/* Block-sparse kernels (see blocksparse.h): products with a block-sparse weight, and the ops of
 * block-sparse attention.
 *
 * Weight products pack rows of the dense operand block-major (panel b holds a slice of rows of
 * block column b, rows bs apart), so the micro-kernels read short contiguous rows instead of
 * rows a power-of-two stride apart (which would all land in the same few cache sets).  fprop
 * and bprop give each OpenMP thread MT rows at a time, packed into the thread's own buffer and
 * multiplied into every output block column: no barrier but the last, so a thread the OS
 * descheduled holds back MT rows, not the team.  The weight gradient packs MC rows of both
 * operands for the whole team, then threads take stored blocks dynamically.  Each output tile
 * of MR x bs stays in vector registers (GCC vector extensions: 64-byte vectors with AVX-512,
 * 32-byte ones without, as -march=native enables) while it accumulates over every stored
 * block of its column, one broadcast of the input times one row of the weight block per
 * step.  Threads write disjoint outputs, so
 * results do not depend on the number of threads.
 */
#include "no_fp_traps.h"
#include "common.h"
#include "blocksparse.h"
#include "blocksparse_gemm.h"

#include <omp.h>

#define MC 256
#define MT 48
int bs_chunk_rows(void) { return MC; }
int bs_task_rows(void) { return MT; }
int bs_threads(void) { return omp_get_max_threads(); }

#define NL_PRAGMA(x) _Pragma(#x)
/* bytes of a vector of a bs-wide block row (at most a register: BS_VEC_BYTES), and how many
 * make the row */
#define VB(BS) ((int)((BS) * sizeof(real) < BS_VEC_BYTES ? (BS) * sizeof(real) : BS_VEC_BYTES))
#define NV_OF(BS) ((int)((BS) * sizeof(real)) / VB(BS))
#define LINE_ELEMS (64 / (int)sizeof(real))

/* Pack rows m0 .. m0+mc-1 of src (ld columns) into panels: dst[b][m][q] = src[m0+m][b*bs+q] for
 * the nb block columns, ph rows per panel; rows mc .. ph-1 are zeros. */
#define DEFINE_PACK(BS)                                                                        \
static void pack_##BS(const real *restrict src, int64_t ld, int64_t mc, real *restrict panel)  \
{                                                                                              \
    for (int64_t m = 0; m < mc; m++)                                                           \
        memcpy(panel + m * BS, src + m * ld, BS * sizeof(real));                               \
}
DEFINE_PACK(8)
DEFINE_PACK(16)
DEFINE_PACK(32)
DEFINE_PACK(64)

static void pack_panel(const real *src, int64_t ld, int64_t m0, int64_t mc, int64_t b,
                       int64_t bs, int64_t ph, real *dst)
{
    real *panel = dst + b * ph * bs;
    const real *from = src + m0 * ld + b * bs;
    switch (bs) {
    case 8: pack_8(from, ld, mc, panel); break;
    case 16: pack_16(from, ld, mc, panel); break;
    case 32: pack_32(from, ld, mc, panel); break;
    default: pack_64(from, ld, mc, panel); break;
    }
    if (mc < ph)
        memset(panel + mc * bs, 0, (size_t)(ph - mc) * bs * sizeof(real));
}

/* TILE_BS: y[0:mr, 0:BS] (row stride ldy) = beta * y + sum over entries e in [lo, hi) of
 *   panels[other[e]] rows 0..MR-1 (row stride BS)  @  w[k[e]] (BS x BS, row-major).
 * UPDATE_BS: dw (BS x BS) = beta * dw + a^T @ b over mc rows of panels a, b (row stride BS). */
#define DEFINE_BS(BS, MR, MRU)                                                                 \
typedef real vec##BS __attribute__((vector_size(VB(BS))));                                    \
enum { VL##BS = VB(BS) / (int)sizeof(real), NV##BS = BS / VL##BS };                            \
static inline vec##BS load##BS(const real *p)                                                 \
{                                                                                              \
    vec##BS v;                                                                                 \
    memcpy(&v, p, sizeof v);                                                                   \
    return v;                                                                                  \
}                                                                                              \
static void tile_##BS(const real *restrict panels, int64_t ph, const real *restrict w,       \
                      const int32_t *kidx, const int32_t *other, int32_t lo, int32_t hi,       \
                      real *restrict y, int64_t ldy, int64_t mr, real beta)                    \
{                                                                                              \
    vec##BS acc[MR][NV##BS];                                                                   \
    NL_PRAGMA(GCC unroll 32)                                                                   \
    for (int i = 0; i < MR; i++)                                                               \
        NL_PRAGMA(GCC unroll 8)                                                                \
        for (int v = 0; v < NV##BS; v++)                                                       \
            acc[i][v] = beta == 0 || i >= mr ? (vec##BS){0}                                    \
                                             : beta * load##BS(y + i * ldy + v * VL##BS);      \
    for (int32_t e = lo; e < hi; e++) {                                                        \
        const real *restrict xp = panels + (int64_t)other[e] * ph * BS;                       \
        const real *restrict wb = w + (int64_t)kidx[e] * BS * BS;                              \
        const int32_t en = e + 1 < hi ? e + 1 : e;                                             \
        const real *xn = panels + (int64_t)other[en] * ph * BS;                                \
        const real *wn = w + (int64_t)kidx[en] * BS * BS;                                      \
        /* the next entry's rows now, its weights one row per step */                          \
        for (int l = 0; l < MR * BS; l += LINE_ELEMS)                                          \
            __builtin_prefetch(xn + l, 0, 3);                                                  \
        for (int q = 0; q < BS; q++) {                                                         \
            for (int l = 0; l < BS; l += LINE_ELEMS)                                           \
                __builtin_prefetch(wn + q * BS + l, 0, 3);                                     \
            vec##BS wv[NV##BS];                                                                \
            NL_PRAGMA(GCC unroll 8)                                                            \
            for (int v = 0; v < NV##BS; v++)                                                   \
                wv[v] = load##BS(wb + q * BS + v * VL##BS);                                    \
            NL_PRAGMA(GCC unroll 32)                                                           \
            for (int i = 0; i < MR; i++) {                                                     \
                const real xv = xp[i * BS + q];                                                \
                NL_PRAGMA(GCC unroll 8)                                                        \
                for (int v = 0; v < NV##BS; v++)                                               \
                    acc[i][v] += xv * wv[v];                                                   \
            }                                                                                  \
        }                                                                                      \
    }                                                                                          \
    real part[mr < MR ? MR * BS : 1];                                                          \
    real *out = mr < MR ? part : y;                                                            \
    const int64_t ldo = mr < MR ? BS : ldy;                                                    \
    NL_PRAGMA(GCC unroll 32)                                                                   \
    for (int i = 0; i < MR; i++)                                                               \
        NL_PRAGMA(GCC unroll 8)                                                                \
        for (int v = 0; v < NV##BS; v++)                                                       \
            memcpy(out + i * ldo + v * VL##BS, &acc[i][v], sizeof acc[i][v]);                  \
    if (mr < MR)                                                                               \
        for (int64_t i = 0; i < mr; i++)                                                       \
            memcpy(y + i * ldy, part + i * BS, BS * sizeof(real));                             \
}                                                                                              \
static void update_##BS(const real *restrict a, const real *restrict b, int64_t mc,           \
                        real *restrict dw, real beta)                                          \
{                                                                                              \
    for (int i0 = 0; i0 < BS; i0 += MRU) {                                                     \
        vec##BS acc[MRU][NV##BS];                                                              \
        NL_PRAGMA(GCC unroll 16)                                                               \
        for (int i = 0; i < MRU; i++)                                                          \
            NL_PRAGMA(GCC unroll 8)                                                            \
            for (int v = 0; v < NV##BS; v++)                                                   \
                acc[i][v] = beta == 0 ? (vec##BS){0}                                           \
                    : beta * load##BS(dw + (i0 + i) * BS + v * VL##BS);                        \
        for (int64_t m = 0; m < mc; m++) {                                                     \
            vec##BS bv[NV##BS];                                                                \
            NL_PRAGMA(GCC unroll 8)                                                            \
            for (int v = 0; v < NV##BS; v++)                                                   \
                bv[v] = load##BS(b + m * BS + v * VL##BS);                                     \
            NL_PRAGMA(GCC unroll 16)                                                           \
            for (int i = 0; i < MRU; i++) {                                                    \
                const real av = a[m * BS + i0 + i];                                            \
                NL_PRAGMA(GCC unroll 8)                                                        \
                for (int v = 0; v < NV##BS; v++)                                               \
                    acc[i][v] += av * bv[v];                                                   \
            }                                                                                  \
        }                                                                                      \
        for (int i = 0; i < MRU; i++)                                                          \
            for (int v = 0; v < NV##BS; v++)                                                   \
                memcpy(dw + (i0 + i) * BS + v * VL##BS, &acc[i][v], sizeof acc[i][v]);         \
    }                                                                                          \
}

/* MR rows per register tile: BS_ACC accumulator vectors over the NV vectors of a block row
 * (at least one row); MRU rows of a weight-gradient tile (dividing bs): BS_UPDATE_ACC
 * accumulators, 8 rows at most. */
#define MR_OF(NV) ((NV) >= BS_ACC ? 1 : BS_ACC / (NV))
#define MRU_OF(NV) \
    (8 * (NV) <= BS_UPDATE_ACC ? 8 : (NV) >= BS_UPDATE_ACC ? 1 : BS_UPDATE_ACC / (NV))
DEFINE_BS(8, MR_OF(NV_OF(8)), MRU_OF(NV_OF(8)))
DEFINE_BS(16, MR_OF(NV_OF(16)), MRU_OF(NV_OF(16)))
DEFINE_BS(32, MR_OF(NV_OF(32)), MRU_OF(NV_OF(32)))
DEFINE_BS(64, MR_OF(NV_OF(64)), MRU_OF(NV_OF(64)))

typedef void (*tile_fn)(const real *, int64_t, const real *, const int32_t *, const int32_t *,
                        int32_t, int32_t, real *, int64_t, int64_t, real);
typedef void (*update_fn)(const real *, const real *, int64_t, real *, real);

static int tile_rows(int64_t bs)
{
    switch (bs) {
    case 8: return MR_OF(NV_OF(8));
    case 16: return MR_OF(NV_OF(16));
    case 32: return MR_OF(NV_OF(32));
    default: return MR_OF(NV_OF(64));
    }
}

static tile_fn tile_for(int64_t bs)
{
    switch (bs) {
    case 8: return tile_8;
    case 16: return tile_16;
    case 32: return tile_32;
    default: return tile_64;
    }
}

static update_fn update_for(int64_t bs)
{
    switch (bs) {
    case 8: return update_8;
    case 16: return update_16;
    case 32: return update_32;
    default: return update_64;
    }
}

/* y (M, nb_out * bs) = beta * y + x (M, nb_in * bs) @ (the blocks w walked by ptr/kidx/other);
 * pack: bs_threads() * MT * nb_in * bs scratch, one slice per thread. */
static void bs_product(const real *x, const real *w, real *y, int64_t M, int64_t nb_in,
                       int64_t nb_out, int64_t bs, const int32_t *ptr, const int32_t *kidx,
                       const int32_t *other, real *pack, real beta)
{
    const tile_fn tile = tile_for(bs);
    const int64_t mr = tile_rows(bs), ldx = nb_in * bs, ldy = nb_out * bs;
    const int64_t nnz = ptr[nb_out], tasks = (M + MT - 1) / MT;
    const int parallel = 2 * M * nnz * bs * bs >= 4 * NL_PARALLEL_MIN && tasks > 1;
#pragma omp parallel if (parallel)
    {
        real *mine = pack + (int64_t)omp_get_thread_num() * MT * ldx;
#pragma omp for schedule(dynamic, 1)
        for (int64_t task = 0; task < tasks; task++) {
            const int64_t m0 = task * MT, mc = M - m0 < MT ? M - m0 : MT;
            for (int64_t b = 0; b < nb_in; b++)
                pack_panel(x, ldx, m0, mc, b, bs, MT, mine);
            for (int64_t c = 0; c < nb_out; c++)
                for (int64_t i0 = 0; i0 < mc; i0 += mr) {
                    const int64_t rows = mc - i0 < mr ? mc - i0 : mr;
                    real *dst = y + (m0 + i0) * ldy + c * bs;
                    if (ptr[c] == ptr[c + 1]) {
                        for (int64_t i = 0; i < rows; i++)
                            nl_scale(dst + i * ldy, bs, beta);
                        continue;
                    }
                    tile(mine + i0 * bs, MT, w, kidx, other, ptr[c], ptr[c + 1], dst, ldy, rows,
                         beta);
                }
        }
    }
}

void bs_linear_fprop(const real *x, const real *w, real *y, int64_t M, int64_t nin,
                     int64_t nout, int64_t bs, const int32_t *ptr, const int32_t *kidx,
                     const int32_t *other, real *pack)
{
    bs_product(x, w, y, M, nin / bs, nout / bs, bs, ptr, kidx, other, pack, 0);
}

void bs_linear_bprop(const real *e, const real *w, real *dx, int64_t M, int64_t nin,
                     int64_t nout, int64_t bs, int64_t nnz, const int32_t *ptr,
                     const int32_t *kidx, const int32_t *other, real *pack, real *wt, real beta)
{
#pragma omp parallel for schedule(static) if (nnz * bs * bs >= NL_PARALLEL_MIN)
    for (int64_t k = 0; k < nnz; k++) {
        const real *src = w + k * bs * bs;
        real *dst = wt + k * bs * bs;
        for (int64_t i = 0; i < bs; i++)
            for (int64_t j = 0; j < bs; j++)
                dst[j * bs + i] = src[i * bs + j];
    }
    bs_product(e, wt, dx, M, nout / bs, nin / bs, bs, ptr, kidx, other, pack, beta);
}

void bs_linear_update(const real *x, const real *e, real *dw, int64_t M, int64_t nin,
                      int64_t nout, int64_t bs, int64_t nnz, const int32_t *row,
                      const int32_t *col, real *packx, real *packe, real beta)
{
    const update_fn update = update_for(bs);
    const int parallel = 2 * M * nnz * bs * bs >= 4 * NL_PARALLEL_MIN;
    if (M == 0) {
        for (int64_t k = 0; k < nnz; k++)
            nl_scale(dw + k * bs * bs, bs * bs, beta);
        return;
    }
    for (int64_t m0 = 0; m0 < M; m0 += MC) {
        const int64_t mc = M - m0 < MC ? M - m0 : MC;
        const real b = m0 == 0 ? beta : 1;
#pragma omp parallel if (parallel)
        {
#pragma omp for schedule(static)
            for (int64_t b = 0; b < nin / bs + nout / bs; b++) {
                if (b < nin / bs)
                    pack_panel(x, nin, m0, mc, b, bs, MC, packx);
                else
                    pack_panel(e, nout, m0, mc, b - nin / bs, bs, MC, packe);
            }
#pragma omp for schedule(dynamic, 4)
            for (int64_t k = 0; k < nnz; k++)
                update(packx + (int64_t)row[k] * MC * bs, packe + (int64_t)col[k] * MC * bs, mc,
                       dw + k * bs * bs, b);
        }
    }
}

/* ---- attention ------------------------------------------------------------------------------ */

void bs_sdd(const real *a, const real *b, real *s, int64_t N, int64_t H, int64_t Tq,
            int64_t Tk, int64_t d, int64_t bs, int64_t nnz, const int32_t *head,
            const int32_t *row, const int32_t *col, real alpha, real *work)
{
#pragma omp parallel if (N * nnz * bs * bs * d >= NL_PARALLEL_MIN)
    {
        real *bt = work + (int64_t)omp_get_thread_num() * d * bs;
#pragma omp for schedule(static) collapse(2)
        for (int64_t n = 0; n < N; n++)
            for (int64_t k = 0; k < nnz; k++) {
                const int64_t h = head[k];
                const real *A = a + ((n * H + h) * Tq + (int64_t)row[k] * bs) * d;
                const real *B = b + ((n * H + h) * Tk + (int64_t)col[k] * bs) * d;
                transpose_block(B, bs, d, d, bt);
                small_gemm(A, d, bt, bs, bs, bs, d, s + (n * nnz + k) * bs * bs, bs, alpha, 0);
            }
    }
}

void bs_dsd(const real *p, const real *b, real *o, int64_t N, int64_t H, int64_t Tin,
            int64_t Tout, int64_t d, int64_t bs, int64_t nnz, const int32_t *ptr,
            const int32_t *kidx, const int32_t *other, int transposed, real beta, real *work)
{
    const int64_t nb = H * (Tout / bs);
#pragma omp parallel if (N * nnz * bs * bs * d >= NL_PARALLEL_MIN)
    {
        real *pt = work + (int64_t)omp_get_thread_num() * bs * bs;
#pragma omp for schedule(dynamic, 16) collapse(2)
        for (int64_t n = 0; n < N; n++)
            for (int64_t ob = 0; ob < nb; ob++) {
                const int64_t h = ob / (Tout / bs), i = ob % (Tout / bs);
                real *O = o + ((n * H + h) * Tout + i * bs) * d;
                if (ptr[ob] == ptr[ob + 1])
                    nl_scale(O, bs * d, beta);
                for (int32_t e = ptr[ob]; e < ptr[ob + 1]; e++) {
                    const real *P = p + (n * nnz + kidx[e]) * bs * bs;
                    const real *B = b + ((n * H + h) * Tin + (int64_t)other[e] * bs) * d;
                    if (transposed) {
                        transpose_block(P, bs, bs, bs, pt);
                        P = pt;
                    }
                    small_gemm(P, bs, B, d, bs, d, bs, O, d, 1, e == ptr[ob] ? beta : 1);
                }
            }
    }
}

/* max of x[0:n] in 8 independent lanes (so the loop vectorizes); -inf for n <= 0 */
static inline real lanes_max(const real *x, int64_t n)
{
    real m[8];
    for (int j = 0; j < 8; j++)
        m[j] = -INFINITY;
    int64_t c = 0;
    for (; c + 8 <= n; c += 8)
        for (int j = 0; j < 8; j++)
            m[j] = x[c + j] > m[j] ? x[c + j] : m[j];
    for (; c < n; c++)
        m[0] = x[c] > m[0] ? x[c] : m[0];
    real top = m[0];
    for (int j = 1; j < 8; j++)
        top = m[j] > top ? m[j] : top;
    return top;
}

/* y[0:n] = exp(scale * x - top), y[n:bs] = 0; returns the sum of y in 8 lanes, then double */
static inline double exp_block_row(const real *x, real *y, int64_t n, int64_t bs, real scale,
                                   real top)
{
    real part[8] = {0};
    int64_t c = 0;
    for (; c + 8 <= n; c += 8)
        for (int j = 0; j < 8; j++) {
            y[c + j] = NL_EXP(scale * x[c + j] - top);
            part[j] += y[c + j];
        }
    for (; c < n; c++) {
        y[c] = NL_EXP(scale * x[c] - top);
        part[0] += y[c];
    }
    for (c = n < 0 ? 0 : n; c < bs; c++)
        y[c] = 0;
    double sum = 0;
    for (int j = 0; j < 8; j++)
        sum += part[j];
    return sum;
}

void bs_softmax(const real *s, real *p, int64_t N, int64_t rows, int64_t R, int64_t C,
                int64_t bs, int64_t nnz, const int32_t *ptr, const int32_t *brow,
                const int32_t *bcol, real scale, int causal)
{
    const int64_t off = (C - R) * bs;
#pragma omp parallel for schedule(dynamic, 16) collapse(2) \
    if (N * nnz * bs * bs >= NL_PARALLEL_MIN)
    for (int64_t n = 0; n < N; n++)
        for (int64_t rw = 0; rw < rows; rw++) {
            const int32_t lo = ptr[rw], hi = ptr[rw + 1];
            for (int64_t r = 0; r < bs; r++) {
                real top = -INFINITY;
                for (int32_t k = lo; k < hi; k++) {
                    const int64_t last = causal ? brow[k] * bs + r + off - (int64_t)bcol[k] * bs
                                                : bs - 1;
                    const int64_t n_vis = last < bs - 1 ? last + 1 : bs;
                    const real m = scale * lanes_max(s + ((n * nnz + k) * bs + r) * bs, n_vis);
                    top = scale >= 0 ? (m > top ? m : top) : top;
                }
                if (scale < 0) {
                    for (int32_t k = lo; k < hi; k++) {
                        const int64_t last = causal ? brow[k] * bs + r + off -
                            (int64_t)bcol[k] * bs : bs - 1;
                        const real *x = s + ((n * nnz + k) * bs + r) * bs;
                        for (int64_t c = 0; c <= last && c < bs; c++)
                            top = scale * x[c] > top ? scale * x[c] : top;
                    }
                }
                if (top == -INFINITY)
                    top = 0;
                double sum = 0;
                for (int32_t k = lo; k < hi; k++) {
                    const int64_t last = causal ? brow[k] * bs + r + off - (int64_t)bcol[k] * bs
                                                : bs - 1;
                    const int64_t n_vis = last < 0 ? 0 : (last < bs - 1 ? last + 1 : bs);
                    const int64_t at = ((n * nnz + k) * bs + r) * bs;
                    sum += exp_block_row(s + at, p + at, n_vis, bs, scale, top);
                }
                const real inv = sum > 0 ? (real)(1.0 / sum) : 0;
                for (int32_t k = lo; k < hi; k++) {
                    real *y = p + ((n * nnz + k) * bs + r) * bs;
                    for (int64_t c = 0; c < bs; c++)
                        y[c] *= inv;
                }
            }
        }
}

void bs_softmax_bprop(const real *p, const real *dp, real *ds, int64_t N, int64_t rows,
                      int64_t bs, int64_t nnz, const int32_t *ptr, real scale)
{
#pragma omp parallel for schedule(dynamic, 16) collapse(2) \
    if (N * nnz * bs * bs >= NL_PARALLEL_MIN)
    for (int64_t n = 0; n < N; n++)
        for (int64_t rw = 0; rw < rows; rw++) {
            const int32_t lo = ptr[rw], hi = ptr[rw + 1];
            for (int64_t r = 0; r < bs; r++) {
                double dot = 0;
                for (int32_t k = lo; k < hi; k++) {
                    const int64_t at = ((n * nnz + k) * bs + r) * bs;
                    for (int64_t c = 0; c < bs; c++)
                        dot += (double)dp[at + c] * (double)p[at + c];
                }
                for (int32_t k = lo; k < hi; k++) {
                    const int64_t at = ((n * nnz + k) * bs + r) * bs;
                    for (int64_t c = 0; c < bs; c++)
                        ds[at + c] = scale * p[at + c] * (dp[at + c] - (real)dot);
                }
            }
        }
}
