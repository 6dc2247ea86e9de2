/* The op-tree virtual machine (see optree.h). */
#include "no_fp_traps.h"
#include <omp.h>

#include "bf16_bits.h"
#include "common.h"
#include "optree.h"

/* exp(y) for y <= 0 in double precision: y = n ln2 + r,
   |r| <= ln2/2, exp(r) by its Taylor polynomial of degree 10 (relative error < 1e-12). */
static inline double nl_exp_neg(double y)
{
    const double c = y < -700.0 ? -700.0 : y;
    const double n = rint(c * 1.4426950408889634);
    const double r = (c - n * 0.6931471803691238) - n * 1.9082149292705877e-10;
    double p = 1.0 / 3628800.0;
    p = p * r + 1.0 / 362880.0;
    p = p * r + 1.0 / 40320.0;
    p = p * r + 1.0 / 5040.0;
    p = p * r + 1.0 / 720.0;
    p = p * r + 1.0 / 120.0;
    p = p * r + 1.0 / 24.0;
    p = p * r + 1.0 / 6.0;
    p = p * r + 0.5;
    p = p * r + 1.0;
    p = p * r + 1.0;
    union { double d; int64_t i; } scale = {.i = ((int64_t)n + 1023) << 52};
    return p * scale.d;
}

/* erf of a float: Abramowitz-Stegun 7.1.26 (|error| < 1.5e-7) evaluated in double, so the
   float result is within 1.5e-7 + half an ulp; about twice as fast as libm's erff here. */
static inline float nl_erff(float xf)
{
    const double x = xf, a = x < 0 ? -x : x;
    const double t = 1.0 / (1.0 + 0.3275911 * a);
    const double poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741
                        + t * (-1.453152027 + t * 1.061405429))));
    const double r = 1.0 - poly * nl_exp_neg(-a * a);
    return (float)(x < 0 ? -r : r);
}
#define NL_ERF(x) _Generic((x), float: nl_erff, default: erf)(x)

#define UNARY(EXPR)                                                                             \
    for (int64_t k = 0; k < n; k++) {                                                           \
        const real x = a[k];                                                                    \
        d[k] = (EXPR);                                                                          \
    }                                                                                           \
    break
#define BINARY(EXPR)                                                                            \
    for (int64_t k = 0; k < n; k++) {                                                           \
        const real x = a[k], y = b[k];                                                          \
        d[k] = (EXPR);                                                                          \
    }                                                                                           \
    break

/* d[k] = op(a[k], b[k]) for k < n.  d may be a (in-place), never overlap it otherwise. */
static void run_op(int op, real *d, const real *a, const real *b, int64_t n)
{
    const real one = 1, zero = 0, half = (real)0.5;
    switch (op) {
    case NL_OP_NEG: UNARY(-x);
    case NL_OP_ABS: UNARY(fabs(x));
    case NL_OP_SQR: UNARY(x * x);
    case NL_OP_SQRT: UNARY(sqrt(x));
    case NL_OP_RSQRT: UNARY(one / sqrt(x));
    case NL_OP_EXP: UNARY(NL_EXP(x));
    case NL_OP_LOG: UNARY(log(x));
    case NL_OP_TANH: UNARY(tanh(x));
    case NL_OP_SIG: UNARY(half * (tanh(half * x) + one));
    case NL_OP_SIGN: UNARY(x > zero ? one : (x < zero ? -one : x));
    case NL_OP_ERF: UNARY(NL_ERF(x));
    case NL_OP_ADD: BINARY(x + y);
    case NL_OP_SUB: BINARY(x - y);
    case NL_OP_MUL: BINARY(x * y);
    case NL_OP_DIV: BINARY(x / y);
    case NL_OP_POW: BINARY(pow(x, y));
    /* NaN-propagating, like numpy's maximum and minimum. */
    case NL_OP_MAXIMUM: BINARY((x >= y || x != x) ? x : y);
    case NL_OP_MINIMUM: BINARY((x <= y || x != x) ? x : y);
    case NL_OP_EQ: BINARY(x == y ? one : zero);
    case NL_OP_NE: BINARY(x != y ? one : zero);
    case NL_OP_LT: BINARY(x < y ? one : zero);
    case NL_OP_LE: BINARY(x <= y ? one : zero);
    case NL_OP_GT: BINARY(x > y ? one : zero);
    case NL_OP_GE: BINARY(x >= y ? one : zero);
    default: break;
    }
}

int64_t optree_scratch_size(int64_t nregs)
{
    return (int64_t)omp_get_max_threads() * nregs * NL_VM_BLOCK;
}

int optree_run_multi(const int32_t *code, int64_t ninstr, const int64_t *leaf_addr,
                     const int64_t *leaf_strides, int64_t nleaf, const double *consts,
                     int64_t nconst, const int32_t *out_reg, const int64_t *out_addr,
                     const int64_t *out_strides, int64_t nout, int64_t rows, int64_t cols,
                     real *scratch)
{
    return optree_run_typed(code, ninstr, leaf_addr, leaf_strides, NULL, nleaf, consts, nconst,
                            out_reg, out_addr, out_strides, NULL, nout, rows, cols, scratch);
}

int optree_run_typed(const int32_t *code, int64_t ninstr, const int64_t *leaf_addr,
                     const int64_t *leaf_strides, const int8_t *leaf_bf16, int64_t nleaf,
                     const double *consts, int64_t nconst, const int32_t *out_reg,
                     const int64_t *out_addr, const int64_t *out_strides,
                     const int8_t *out_bf16, int64_t nout, int64_t rows, int64_t cols,
                     real *scratch)
{
    const int64_t nregs = nleaf + nconst + ninstr;
    if (ninstr < 0 || nregs > NL_VM_MAX_REGS || nout < 1 || nout > NL_VM_MAX_REGS)
        return -1;
    /* rounded[s]: the bf16 output instruction s makes, stored (rounded) right after it runs,
       its register then holding the rounded values for the later trees; else -1.  A bf16
       output's register must be an instruction's own, never a leaf's or a constant's. */
    int32_t rounded[NL_VM_MAX_REGS];
    for (int64_t s = 0; s < ninstr; s++)
        rounded[s] = -1;
    for (int64_t o = 0; out_bf16 && o < nout; o++) {
        const int64_t s = out_reg[o] - nleaf - nconst;
        if (!out_bf16[o])
            continue;
        if (s < 0 || s >= ninstr || code[4 * s + 1] != out_reg[o] || rounded[s] >= 0)
            return -1;
        rounded[s] = (int32_t)o;
    }
    /* direct[s]: the output instruction s stores straight into (its register is that output's
       value and the output is contiguous along a row), else -1; such outputs need no copy. */
    int32_t direct[NL_VM_MAX_REGS], copied[NL_VM_MAX_REGS];
    for (int64_t s = 0; s < ninstr; s++)
        direct[s] = -1;
    for (int64_t o = 0; o < nout; o++) {
        const int64_t s = out_reg[o] - nleaf - nconst;
        copied[o] = 1;
        if (s >= 0 && s < ninstr && direct[s] < 0 && code[4 * s + 1] == out_reg[o]
            && out_strides[2 * o + 1] == 1 && !(out_bf16 && out_bf16[o])) {
            direct[s] = (int32_t)o;
            copied[o] = 0;
        }
    }
    const int64_t nblk = (cols + NL_VM_BLOCK - 1) / NL_VM_BLOCK, total = rows * nblk;
#pragma omp parallel if (rows * cols >= NL_PARALLEL_MIN)
    {
        real *mine = scratch + (int64_t)omp_get_thread_num() * nregs * NL_VM_BLOCK;
        const real *reg[NL_VM_MAX_REGS];
        for (int64_t c = 0; c < nconst; c++) {
            real *r = mine + (nleaf + c) * NL_VM_BLOCK;
            for (int64_t k = 0; k < NL_VM_BLOCK; k++)
                r[k] = (real)consts[c];
            reg[nleaf + c] = r;
        }
#pragma omp for schedule(dynamic, nl_grain(NL_VM_BLOCK))
        for (int64_t t = 0; t < total; t++) {
            const int64_t i = t / nblk, j0 = (t % nblk) * NL_VM_BLOCK;
            const int64_t n = cols - j0 < NL_VM_BLOCK ? cols - j0 : NL_VM_BLOCK;
            for (int64_t l = 0; l < nleaf; l++) {
                const int64_t rs = leaf_strides[2 * l], cs = leaf_strides[2 * l + 1];
                if (leaf_bf16 && leaf_bf16[l]) {
                    const uint16_t *bits = (const uint16_t *)(intptr_t)leaf_addr[l] + i * rs
                                           + j0 * cs;
                    real *r = mine + l * NL_VM_BLOCK;
                    for (int64_t k = 0; k < n; k++)
                        r[k] = (real)bf16_to_f32(bits[k * cs]);
                    reg[l] = r;
                    continue;
                }
                const real *base = (const real *)(intptr_t)leaf_addr[l] + i * rs + j0 * cs;
                if (cs == 1) {
                    reg[l] = base;
                    continue;
                }
                real *r = mine + l * NL_VM_BLOCK;
                for (int64_t k = 0; k < n; k++)
                    r[k] = base[k * cs];
                reg[l] = r;
            }
            for (int64_t s = 0; s < ninstr; s++) {
                const int32_t *ins = code + 4 * s, o = direct[s];
                real *d = o >= 0 ? (real *)(intptr_t)out_addr[o] + i * out_strides[2 * o] + j0
                                 : mine + ins[1] * NL_VM_BLOCK;
                run_op(ins[0], d, reg[ins[2]], ins[3] >= 0 ? reg[ins[3]] : NULL, n);
                reg[ins[1]] = d;
                if (rounded[s] >= 0) {
                    const int64_t b = rounded[s], cs = out_strides[2 * b + 1];
                    uint16_t *bits = (uint16_t *)(intptr_t)out_addr[b] + i * out_strides[2 * b]
                                     + j0 * cs;
                    for (int64_t k = 0; k < n; k++) {
                        const uint16_t v = f32_to_bf16((float)d[k]);
                        bits[k * cs] = v;
                        d[k] = (real)bf16_to_f32(v);
                    }
                }
            }
            for (int64_t o = 0; o < nout; o++) {
                if (!copied[o] || (out_bf16 && out_bf16[o]))
                    continue;
                const int64_t cs = out_strides[2 * o + 1];
                real *out = (real *)(intptr_t)out_addr[o] + i * out_strides[2 * o] + j0 * cs;
                const real *r = reg[out_reg[o]];
                for (int64_t k = 0; k < n; k++)
                    out[k * cs] = r[k];
            }
        }
    }
    return 0;
}

int optree_run(const int32_t *code, int64_t ninstr, const int64_t *leaf_addr,
               const int64_t *leaf_strides, int64_t nleaf, const double *consts, int64_t nconst,
               int64_t out_addr, int64_t out_rs, int64_t out_cs, int64_t rows, int64_t cols,
               real *scratch)
{
    if (ninstr < 1)
        return -1;
    const int32_t out_reg = code[4 * (ninstr - 1) + 1];
    const int64_t out_strides[2] = {out_rs, out_cs};
    return optree_run_multi(code, ninstr, leaf_addr, leaf_strides, nleaf, consts, nconst,
                            &out_reg, &out_addr, out_strides, 1, rows, cols, scratch);
}

int64_t optree_column_sum_work_size(int64_t M, int64_t C)
{
    return nl_block_sums_size(M, C);
}

/* Columns a thread sums at a time when every row is its own block. */
#define COLUMN_CHUNK 512

void optree_column_sum(const real *a, real *out, double *work, int64_t M, int64_t C)
{
    if (M >= 1 && M <= NL_BLOCKS) {
        /* One row per block: a block's sums are its row, so column c's total is the double
         * sum of its M values in row order, taken here directly in one pass (the same bits,
         * without the work array's three passes over C). */
#pragma omp parallel for schedule(static) if (M * C >= NL_PARALLEL_MIN)
        for (int64_t c0 = 0; c0 < C; c0 += COLUMN_CHUNK) {
            const int64_t width = C - c0 < COLUMN_CHUNK ? C - c0 : COLUMN_CHUNK;
            double acc[COLUMN_CHUNK];
            for (int64_t c = 0; c < width; c++)
                acc[c] = 0;
            for (int64_t m = 0; m < M; m++) {
                const real *row = a + m * C + c0;
                for (int64_t c = 0; c < width; c++)
                    acc[c] += (double)row[c];
            }
            for (int64_t c = 0; c < width; c++)
                out[c0 + c] = (real)acc[c];
        }
        return;
    }
    const int64_t nb = nl_blocks(M);
    double *part = work;
    real *run = nl_block_sums_runs(work, M, C);
#pragma omp parallel for schedule(dynamic, 1) if (M * C >= NL_PARALLEL_MIN)
    for (int64_t blk = 0; blk < nb; blk++) {
        double *s = part + blk * C;
        real *r = run + blk * C;
        int64_t lo, hi;
        nl_split(M, blk, nb, &lo, &hi);
        for (int64_t c = 0; c < C; c++)
            s[c] = 0;
        for (int64_t m0 = lo; m0 < hi; m0 += NL_RUN) {
            const int64_t m1 = m0 + NL_RUN < hi ? m0 + NL_RUN : hi;
            memcpy(r, a + m0 * C, (size_t)C * sizeof(real));
            for (int64_t m = m0 + 1; m < m1; m++) {
                const real *row = a + m * C;
                for (int64_t c = 0; c < C; c++)
                    r[c] += row[c];
            }
            for (int64_t c = 0; c < C; c++)
                s[c] += (double)r[c];
        }
    }
    for (int64_t c = 0; c < C; c++) {
        double total = 0;
        for (int64_t blk = 0; blk < nb; blk++)
            total += part[blk * C + c];
        out[c] = (real)total;
    }
}
