/* Fused attention: tiled online-softmax forward and a backward that recomputes each tile's
 * probabilities from the saved log-sum-exp (see flash_attention.h for the arguments).
 *
 * Forward: one OpenMP work item per (slice, query block), or per (slice, up to FA_GROUP query
 * blocks) on long slices (fa_group).  For each visited key block the scores S = q_r k_c^T
 * (bq x bk) are made in a tile buffer, masked, and folded into the running row maximum m and
 * sum l; the output rows are rescaled by exp(m_old - m_new) and accumulate P v_c, all in a
 * per-thread buffer of bq x dv per query block.  Nothing of size Tq x Tk exists.
 *
 * Backward: one work item per (slice, group of key blocks).  For each key block c of the group
 * (in order; on long slices up to FA_GROUP of them at a time, each query block's tiles with
 * them one after the other) and each query block r visiting it (in order):
 * P = exp(scale q_r k_c^T - lse),
 * dropout factors Z regenerated from Philox, dV_c += (P Z)^T dO_r, dP = (dO_r v_c^T) Z,
 * dS = scale P (dP - D_r) with D_r = rowsum(dO_r * O_r), dQ_r += dS k_c, dK_c += dS^T q_r.
 * Each sum has one fixed order.
 *
 * The products are small tile GEMMs (fa_gemm, flash_attention_tiles.h) on explicit vectors of
 * 64 bytes (one AVX-512 register) where the compiler targets AVX-512, 32 bytes otherwise; the
 * GCC/Clang vector extension keeps them in registers without naming an instruction set.
 * Token-major operands that every tile rereads are read through a per-thread contiguous copy
 * of the slice (fa_pack_size) when the slice is long (FA_PACK_ROWS).  On a tile the causal
 * diagonal crosses, the products skip the blocks and terms that are hidden (fa_band); on a
 * tile with nothing hidden, the backward's P and dS are made in the products' epilogues
 * (fa_epi, flash_attention_tiles.h).
 *
 * The two passes (flash_attention_fprop.h, flash_attention_bprop.h) are included twice below:
 * on operands of `real` (fa_fprop, fa_bprop) and on bf16 bit patterns (fa_fprop_bf16,
 * fa_bprop_bf16), whose rows are widened into the threads' staging as tiles first read them
 * and rounded when written (flash_attention_bf16.h); the tiles and sums are the same. */
#include "no_fp_traps.h"
#include <omp.h>

#include "common.h"
#include "flash_attention.h"
#include "flash_attention_tiles.h"
#include "flash_attention_dropout.h"
#include "flash_attention_softmax.h"
#include "flash_attention_bf16.h"

/* The first element of slice b's rows of a tensor with strides st (example, head, row). */
#define FA_SLICE(p, st, b) ((p) + ((b) / H) * (st)[0] + ((b) % H) * (st)[1])

int64_t fa_threads(void) { return omp_get_max_threads(); }

/* A work item takes up to FA_GROUP blocks of a slice together (forward: query blocks, which
 * read each key and value tile once for all; backward: key blocks, reading each query, dout
 * and dq tile once for all) when the rows the blocks of a slice share, `rows` x `width` reals,
 * take more than FA_GROUP_BYTES: read once per block, they would come from beyond a core's L2
 * cache for every tile.  Grouped, a group's own tiles stay in L2 and each shared tile is
 * fetched once per group.  Groups change neither the tiles nor the order of any sum, so the
 * results are the same bits with or without them. */
#define FA_GROUP 4
#define FA_GROUP_BYTES ((int64_t)1 << 20)

static int64_t fa_group(int64_t rows, int64_t width, int64_t blocks)
{
    if (rows * width * (int64_t)sizeof(real) <= FA_GROUP_BYTES)
        return 1;
    return blocks < FA_GROUP ? (blocks < 1 ? 1 : blocks) : FA_GROUP;
}

/* A block's place in its visit list: entries list[e .. end) are still to visit.  The blocks of
 * a group visit the union of their lists in increasing order (fa_next_visit), each block its
 * own entries in order (fa_take_visit). */
typedef struct {
    int32_t e, end;
} fa_visits;

/* The smallest next entry of the members' lists (INT64_MAX: all visited). */
static int64_t fa_next_visit(const fa_visits *vis, int64_t members, const int32_t *list)
{
    int64_t x = INT64_MAX;
    for (int64_t g = 0; g < members; g++)
        if (vis[g].e < vis[g].end && list[vis[g].e] < x)
            x = list[vis[g].e];
    return x;
}

/* 1, having moved past it, when x is the next entry of v's list; else 0. */
static int fa_take_visit(fa_visits *v, const int32_t *list, int64_t x)
{
    if (v->e == v->end || list[v->e] != x)
        return 0;
    v->e++;
    return 1;
}

/* A thread's tiles start on a 64-byte boundary (FA_ALIGN reals of slack): the tile rows are
 * then aligned vectors, which a work array from a plain allocator does not guarantee. */
#define FA_ALIGN ((int64_t)(64 / sizeof(real)))

int64_t fa_work_size(int64_t dk, int64_t dv)
{
    return FA_GROUP * (dk + dv) * FA_LD + 4 * FA_MAX_BLOCK * FA_LD + FA_ALIGN;
}

/* A work item's per-block tiles in a thread's work array: block g of the group has
 * (dk + dv) x FA_LD reals from here (forward: its qt and acc; backward: its kt and vt); the
 * tiles the blocks share follow those of the G blocks (fa_member_tiles(buf, G, ...)). */
static real *fa_member_tiles(real *buf, int64_t g, int64_t dk, int64_t dv)
{
    return buf + g * (dk + dv) * FA_LD;
}

/* The first 64-byte boundary in x. */
static real *fa_aligned(real *x)
{
    return (real *)(((uintptr_t)x + 63) & ~(uintptr_t)63);
}

int64_t fa_pack_size(int64_t Tq, int64_t Tk, int64_t dk, int64_t dv)
{
    return (Tq > Tk ? Tq : Tk) * (dk + dv) + FA_ALIGN;
}

/* Strided slices of at most FA_PACK_ROWS rows are read in place: their rows stay in cache and
 * in the TLB across the blocks that reread them, so a copy costs more than it saves. */
#define FA_PACK_ROWS 256

/* The calling thread's part of the packed array of `size` reals a thread (NULL: none),
 * aligned. */
static real *fa_thread_pack(real *packed, int64_t size)
{
    return packed ? fa_aligned(packed + omp_get_thread_num() * size) : NULL;
}

/* The calling thread's tiles in the work array of `size` reals a thread, aligned. */
static real *fa_thread_work(real *work, int64_t size)
{
    return fa_aligned(work + omp_get_thread_num() * size);
}

/* The bf16 calls' work and packed arrays: fa_work_size's tiles, then the staging of the
 * backward's key blocks (each member's k rows, dK and dV sums: FA_MAX_BLOCK x (2 dk + dv)) and
 * of the rows widened before a transpose (FA_MAX_BLOCK x max(dk, dv)); the packed rows of a
 * slice (forward: k and v; backward: q, dout and the dQ sums). */
int64_t fa_work_size_bf16(int64_t dk, int64_t dv)
{
    return fa_work_size(dk, dv) + FA_GROUP * FA_MAX_BLOCK * (2 * dk + dv) +
           FA_MAX_BLOCK * (dk > dv ? dk : dv);
}

int64_t fa_pack_size_bf16(int64_t Tq, int64_t Tk, int64_t dk, int64_t dv)
{
    return (Tq > Tk ? Tq : Tk) * (2 * dk + dv) + FA_ALIGN;
}

/* The staging of a bf16 call in a thread's tiles: after those of fa_work_size. */
static real *fa_bf16_staging(real *buf, int64_t dk, int64_t dv)
{
    return buf + fa_work_size(dk, dv) - FA_ALIGN;
}

/* ---- forward ---------------------------------------------------------------------------------- */

/* One query block of a forward work item: its rows [i0, i0 + nr), qt (the block transposed,
 * dk x nr, ld FA_LD: scaled, base 2) and acc (its output rows, nr x dv, contiguous), and the
 * online softmax's running maximum m, sum l and the last step's factor alpha of each row;
 * `set`: acc is not written yet. */
typedef struct {
    real *qt, *acc;
    real m[FA_MAX_BLOCK], l[FA_MAX_BLOCK], alpha[FA_MAX_BLOCK];
    int64_t i0, nr;
    int set;
} fa_qblock;

/* The operands of a forward work item's tiles: the slice b's keys and values (rows kb, vb at
 * strides ldk, ldv; keys from kend on hidden by the key mask km), st and z (tiles: the scores
 * transposed, nc x nr, and the dropout factors). */
typedef struct {
    const real *kb, *vb, *km;
    int64_t ldk, ldv, kend, b;
    real *st, *z;
} fa_keys;

/* Query block qb against key block j0 (nc keys): S^T = k_c q_r^T, masked, one step of the
 * online softmax, dropout, then acc = acc alpha + P v_c. */
static void fa_fprop_tile(fa_qblock *qb, const fa_keys *kv, int64_t j0, int64_t nc, int64_t dk,
                          int64_t dv, int64_t off, int causal, const fa_dropout *dr, int64_t H,
                          int64_t Tq, int64_t Tk)
{
    const int64_t i0 = qb->i0, nr = qb->nr;
    real *st = kv->st;
    const fa_band keys = fa_causal_band(FA_ROWS_UPTO_COL, causal, i0, j0, nc, off);
    fa_gemm(nc, nr, dk, kv->kb + j0 * kv->ldk, kv->ldk, 1, qb->qt, FA_LD, st, FA_LD, 0, NULL,
            keys);
    fa_mask(st, 1, FA_LD, nr, nc, i0, j0, off, causal, kv->km);
    fa_online_softmax(st, nr, nc, qb->m, qb->l, qb->alpha, keys);
    if (dr) {
        fa_dropout_tile(dr, kv->b, H, Tq, Tk, i0, nr, j0, nc, kv->z, 1, FA_LD);
        for (int64_t c = 0; c < nc; c++)
#pragma omp simd
            for (int64_t i = 0; i < nr; i++)
                st[c * FA_LD + i] *= kv->z[c * FA_LD + i];
    }
    /* acc = acc alpha + P v_c (each row of acc rescaled as it is loaded) */
    fa_gemm(nr, dv, nc, st, 1, FA_LD, kv->vb + j0 * kv->ldv, kv->ldv, qb->acc, dv, !qb->set,
            qb->alpha, fa_causal_band(FA_P_UPTO_ROW, causal, i0, j0, nc, off));
    qb->set = 0;
}

/* The output rows of query block qb (acc / l; 0 with no key seen) at o (row stride ldo) and
 * their log-sum-exp (base e) at lse. */
static void fa_fprop_finish(fa_qblock *qb, real *o, int64_t ldo, real *lse, int64_t dv)
{
    if (qb->set) /* no key seen */
        fa_zero_rows(qb->acc, qb->nr, dv, dv);
    for (int64_t i = 0; i < qb->nr; i++) {
        const real l = qb->l[i], inv = l > 0 ? 1 / l : 0;
        for (int64_t d = 0; d < dv; d++)
            o[i * ldo + d] = qb->acc[i * dv + d] * inv;
        lse[i] = l > 0 ? (real)(((double)qb->m[i] + log2((double)l)) * FA_LN2) : -INFINITY;
    }
}

/* ---- backward --------------------------------------------------------------------------------- */
typedef struct {
    real *kt, *vt, *p, *dp, *z, *t;
} fa_bwork;

/* One key block of a backward work item: keys [j0, j0 + nc), their rows k, dK and dV rows dk,
 * dv, and the first of its entries in rows (lo). */
typedef struct {
    const real *k;
    real *dk, *dv;
    int64_t j0, nc;
    int32_t lo;
} fa_kblock;

/* Row strides (elements) of the backward pass's operands. */
typedef struct {
    int64_t q, k, dout, dq, dk, dv;
} fa_rows;

/* The contribution of query block (i0, nr) and key block (j0, nc) of slice b: `first` (the key
 * block's first visiting query block) sets dK_c and dV_c, `first_q` (the query block's first
 * tile in its group) sets dQ_r; otherwise they are summed into. */
static void fa_bprop_tile(const fa_bwork *w, const fa_rows *ld, const real *qb, const real *kb,
                          const real *Db, const real *dob, const real *lb, real *dqb, real *dkb,
                          real *dvb, int64_t dk, int64_t dv, int64_t nr, int64_t nc, int64_t i0,
                          int64_t j0, int64_t off, int causal, const real *km, real sc,
                          const fa_dropout *dr, int64_t b, int64_t H, int64_t Tq, int64_t Tk,
                          int first, int first_q)
{
    real *p = w->p, *dp = w->dp, *pz = w->t, *z = dr ? w->z : NULL;
    const fa_band rows = fa_causal_band(FA_ROWS_FROM_COL, causal, i0, j0, nc, off);
    /* P = 2^(S - lse) with lse in base 2 (no visible key: P = 0); on a tile with nothing
     * hidden in one product (fa_gemm_exp2), else the product, the mask and then the powers,
     * over whole rows of FA_LD (a count the compiler knows): columns from nc on are computed
     * and never read; on a tile the diagonal crosses, row i only up to the vector holding key
     * i + e + FA_ROWS - 1, the last that the banded products read */
    real top[FA_MAX_BLOCK];
    for (int64_t i = 0; i < nr; i++)
        top[i] = lb[i] == -INFINITY ? INFINITY : (real)(lb[i] * FA_LOG2E);
    const int plain = rows.kind == FA_FULL && !km;
    if (plain)
        fa_gemm_exp2(nr, nc, dk, qb, ld->q, 1, w->kt, FA_LD, p, FA_LD, top);
    else {
        fa_gemm(nr, nc, dk, qb, ld->q, 1, w->kt, FA_LD, p, FA_LD, 0, NULL, rows);
        fa_mask(p, FA_LD, 1, nr, nc, i0, j0, off, causal, km);
    }
    for (int64_t i = 0; i < nr && !plain; i++) {
        real *row = p + i * FA_LD;
        int64_t cend = FA_LD;
        if (rows.kind != FA_FULL) {
            cend = i + rows.e + FA_ROWS;
            cend = cend <= 0 ? 0 : (cend >= FA_LD ? FA_LD : (cend + FA_W - 1) / FA_W * FA_W);
        }
        for (int64_t c = 0; c < cend; c += FA_W)
            fa_store(row + c, fa_vexp2(fa_load(row + c) - top[i]));
    }
    if (z) {
        fa_dropout_tile(dr, b, H, Tq, Tk, i0, nr, j0, nc, z, FA_LD, 1);
        for (int64_t i = 0; i < nr; i++)
#pragma omp simd
            for (int64_t c = 0; c < nc; c++)
                pz[i * FA_LD + c] = p[i * FA_LD + c] * z[i * FA_LD + c];
    }
    /* dV_c (+)= (P Z)^T dO_r: the key block's first visited query block sets dV_c and dK_c */
    const fa_band queries = fa_causal_band(FA_P_FROM_ROW, causal, i0, j0, nc, off);
    fa_gemm(nc, dv, nr, z ? pz : p, 1, FA_LD, dob, ld->dout, dvb, ld->dv, !first, NULL, queries);
    /* dP = dO_r v_c^T, then dS = scale P (dP Z - D) in place: in the product's epilogue
     * (fa_gemm_ds) on a tile with nothing hidden and no dropout */
    const int fused = rows.kind == FA_FULL && !z;
    if (fused)
        fa_gemm_ds(nr, nc, dv, dob, ld->dout, 1, w->vt, FA_LD, dp, FA_LD, Db, p, sc);
    else
        fa_gemm(nr, nc, dv, dob, ld->dout, 1, w->vt, FA_LD, dp, FA_LD, 0, NULL, rows);
    for (int64_t i = 0; i < nr && !fused; i++) {
        const real D = Db[i];
        real *dprow = dp + i * FA_LD;
        const real *prow = p + i * FA_LD, *zr = z ? z + i * FA_LD : NULL;
        if (rows.kind != FA_FULL) {
            /* a tile the diagonal crosses: dS of the keys row i sees (up to `last`), 0 at the
             * hidden keys the banded products read (up to last + FA_ROWS - 1); dP was not made
             * for blocks hidden entirely */
            const int64_t last = i + rows.e;
            const int64_t cv = last < 0 ? 0 : (last + 1 > nc ? nc : last + 1);
            const int64_t cz = last + FA_ROWS > nc ? nc : last + FA_ROWS;
#pragma omp simd
            for (int64_t c = 0; c < cv; c++)
                dprow[c] = sc * prow[c] * ((zr ? dprow[c] * zr[c] : dprow[c]) - D);
            for (int64_t c = cv; c < cz; c++)
                dprow[c] = 0;
        } else {
#pragma omp simd
            for (int64_t c = 0; c < nc; c++)
                dprow[c] = sc * prow[c] * (dprow[c] * zr[c] - D);
        }
    }
    fa_gemm(nr, dk, nc, dp, FA_LD, 1, kb, ld->k, dqb, ld->dq, !first_q, NULL,
            fa_causal_band(FA_P_UPTO_ROW, causal, i0, j0, nc, off));
    fa_gemm(nc, dk, nr, dp, 1, FA_LD, qb, ld->q, dkb, ld->dk, !first, NULL, queries);
}

/* ---- the entry points: operands of `real` (fa_fprop, fa_bprop) and of bf16 bits ------------- */
#define FA_BF16 0
#define FA_T real
#define FA_NAME(f) f
#include "flash_attention_fprop.h"
#include "flash_attention_bprop.h"
#undef FA_BF16
#undef FA_T
#undef FA_NAME

#define FA_BF16 1
#define FA_T uint16_t
#define FA_NAME(f) f##_bf16
#include "flash_attention_fprop.h"
#include "flash_attention_bprop.h"
#undef FA_BF16
#undef FA_T
#undef FA_NAME
