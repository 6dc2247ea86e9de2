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
 * (fa_epi, flash_attention_tiles.h). */
#include <omp.h>

#include "common.h"
#include "flash_attention.h"
#include "flash_attention_tiles.h"
#include "flash_attention_dropout.h"
#include "flash_attention_softmax.h"

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

/* The calling thread's part of the packed array (NULL: none), aligned. */
static real *fa_thread_pack(real *packed, int64_t Tq, int64_t Tk, int64_t dk, int64_t dv)
{
    return packed ? fa_aligned(packed + omp_get_thread_num() * fa_pack_size(Tq, Tk, dk, dv))
                  : NULL;
}

/* The calling thread's tiles in the work array, aligned. */
static real *fa_thread_work(real *work, int64_t dk, int64_t dv)
{
    return fa_aligned(work + omp_get_thread_num() * fa_work_size(dk, dv));
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

void fa_fprop(const real *q, const real *k, const real *v, real *out, real *lse, int64_t B,
              int64_t H, int64_t Tq, int64_t Tk, int64_t dk, int64_t dv,
              const int64_t *strides, double scale, int causal, const real *key_mask,
              int64_t bq, int64_t bk, const int32_t *row_ptr, const int32_t *cols,
              int64_t table_heads, double keep, uint64_t seed, uint32_t step, uint32_t stream,
              uint64_t first, real *work, real *packed)
{
    const int64_t nqb = (Tq + bq - 1) / bq, off = Tk - Tq;
    /* a work item: a group of G query blocks (fa_group: the keys and values they share) */
    const int64_t G = fa_group(Tk, dk + dv, nqb), ngroups = (nqb + G - 1) / G;
    const int64_t items = B * ngroups;
    const int drop = keep < 1.0;
    const fa_dropout dr = fa_make_dropout(drop ? keep : 1.0, seed, step, stream, first, H, Tq, Tk);
    const real sc2 = (real)(scale * FA_LOG2E);
#pragma omp parallel if (items > 1 && B * Tq * Tk * (dk + dv) >= NL_PARALLEL_MIN)
    {
        /* each block's qt and acc, then st and z: the scores / probabilities transposed (nc x
         * nr), so the per-query steps run along vectors of queries */
        real *buf = fa_thread_work(work, dk, dv);
        fa_qblock qbs[FA_GROUP];
        fa_visits vis[FA_GROUP]; /* each block's entries of cols */
        for (int64_t g = 0; g < G; g++)
            qbs[g].qt = fa_member_tiles(buf, g, dk, dv), qbs[g].acc = qbs[g].qt + dk * FA_LD;
        fa_keys kv = {.st = fa_member_tiles(buf, G, dk, dv)};
        kv.z = kv.st + FA_MAX_BLOCK * FA_LD;
        /* strided k and v rows: the slice's copied to kpack, vpack (contiguous) when more
         * than one query block reads them and the slice is long; slice pb's are there now */
        const int64_t *sq = strides, *sk = strides + 3, *sv = strides + 6, *so = strides + 9;
        const int pack = nqb > 1 && Tk > FA_PACK_ROWS && (sk[2] != dk || sv[2] != dv);
        real *kpack = pack ? fa_thread_pack(packed, Tq, Tk, dk, dv) : NULL;
        real *vpack = kpack ? kpack + Tk * dk : NULL;
        int64_t pb = -1;
#pragma omp for schedule(dynamic, 1)
        for (int64_t item = 0; item < items; item++) {
            /* the last query blocks first: under a causal mask they visit the most tiles */
            const int64_t b = item / ngroups, r0 = (ngroups - 1 - item % ngroups) * G;
            const int64_t members = nqb - r0 < G ? nqb - r0 : G;
            const int64_t t = table_heads == 1 ? 0 : b % H;
            kv.b = b, kv.km = key_mask ? key_mask + (b / H) * Tk : NULL;
            kv.kb = FA_SLICE(k, sk, b), kv.vb = FA_SLICE(v, sv, b);
            kv.ldk = sk[2], kv.ldv = sv[2];
            /* keys from kend on are all hidden by the key mask (trailing padding): their
             * probabilities are exactly 0, so the tiles stop there */
            kv.kend = Tk;
            while (kv.km && kv.kend > 0 && kv.km[kv.kend - 1] == 0)
                kv.kend--;
            if (kpack) {
                if (pb != b) {
                    fa_pack(kv.kb, kv.ldk, kv.kend, dk, kpack);
                    fa_pack(kv.vb, kv.ldv, kv.kend, dv, vpack), pb = b;
                }
                kv.kb = kpack, kv.vb = vpack, kv.ldk = dk, kv.ldv = dv;
            }
            for (int64_t g = 0; g < members; g++) {
                fa_qblock *qb = &qbs[g];
                const int64_t r = r0 + g;
                qb->i0 = r * bq, qb->nr = Tq - qb->i0 < bq ? Tq - qb->i0 : bq;
                fa_transpose(FA_SLICE(q, sq, b) + qb->i0 * sq[2], sq[2], qb->nr, dk, sc2, qb->qt);
                for (int64_t i = 0; i < FA_MAX_BLOCK; i++)
                    qb->m[i] = -INFINITY, qb->l[i] = 0;
                qb->set = 1;
                vis[g].e = row_ptr[t * nqb + r], vis[g].end = row_ptr[t * nqb + r + 1];
            }
            /* the key blocks the group visits, in increasing order (each block's in its
             * order), each tile of a key block right after the last: read once from memory */
            for (int64_t c; (c = fa_next_visit(vis, members, cols)) != INT64_MAX;) {
                const int64_t j0 = c * bk, nc = kv.kend - j0 < bk ? kv.kend - j0 : bk;
                for (int64_t g = 0; g < members; g++)
                    if (fa_take_visit(&vis[g], cols, c) && j0 < kv.kend)
                        fa_fprop_tile(&qbs[g], &kv, j0, nc, dk, dv, off, causal,
                                      drop ? &dr : NULL, H, Tq, Tk);
            }
            for (int64_t g = 0; g < members; g++)
                fa_fprop_finish(&qbs[g], FA_SLICE(out, so, b) + qbs[g].i0 * so[2], so[2],
                                lse + b * Tq + qbs[g].i0, dv);
        }
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


void fa_bprop(const real *q, const real *k, const real *v, const real *out, const real *lse,
              const real *dout, real *dq, real *dkey, real *dval, int64_t B, int64_t H,
              int64_t Tq, int64_t Tk, int64_t dk, int64_t dv, const int64_t *strides,
              double scale, int causal, const real *key_mask, int64_t bq, int64_t bk,
              const int32_t *col_ptr, const int32_t *rows, int64_t table_heads, double keep,
              uint64_t seed, uint32_t step, uint32_t stream, uint64_t first, int64_t groups,
              const int32_t *group_ptr, const int32_t *group_cols, real *dq_parts, real *drows,
              real *work, real *packed)
{
    const int64_t nkb = (Tk + bk - 1) / bk, nqb = (Tq + bq - 1) / bq, off = Tk - Tq;
    const int drop = keep < 1.0;
    const fa_dropout dr = fa_make_dropout(drop ? keep : 1.0, seed, step, stream, first, H, Tq, Tk);
    const real sc = (real)scale, sc2 = (real)(scale * FA_LOG2E);
    const int64_t items = B * groups;
    const int64_t G = fa_group(Tq, 2 * dk + dv, nkb);
#pragma omp parallel if (items > 1 && B * Tq * Tk * (dk + dv) >= NL_PARALLEL_MIN)
    {
        /* strides: (example, head, row) of q, k, v, out, dout, dq, dk, dv in that order */
        const int64_t *sq = strides, *sk = strides + 3, *sv = strides + 6, *so = strides + 9;
        const int64_t *sdo = strides + 12, *sdq = strides + 15, *sdk = strides + 18;
        const int64_t *sdv = strides + 21;
        const fa_rows ld0 = {sq[2], sk[2], sdo[2], sdq[2], sdk[2], sdv[2]};
        /* strided q and dout rows: the slice's copied to qpack, dopack (contiguous) when more
         * than one key block reads them and the slice is long; slice pb's are there now */
        const int pack = nkb > 1 && Tq > FA_PACK_ROWS && (sq[2] != dk || sdo[2] != dv);
        real *qpack = pack ? fa_thread_pack(packed, Tq, Tk, dk, dv) : NULL;
        real *dopack = qpack ? qpack + Tq * dk : NULL;
        int64_t pb = -1;
        const size_t tile = FA_MAX_BLOCK * FA_LD;
        uint64_t seen[nqb / 64 + 1]; /* a bit per query block */
        /* each key block's kt and vt (fa_member_tiles; w's while its tiles run), then the
         * tiles they share */
        real *buf = fa_thread_work(work, dk, dv);
        fa_bwork w = {NULL, NULL, fa_member_tiles(buf, G, dk, dv), NULL, NULL, NULL};
        w.dp = w.p + tile, w.z = w.dp + tile, w.t = w.z + tile;
        /* D = rowsum(dO * O) of every query row, once: here when a slice has several work
         * items, else by the slice's item */
        if (groups > 1) {
#pragma omp for schedule(static)
            for (int64_t b = 0; b < B; b++)
                fa_rowsums(FA_SLICE(out, so, b), so[2], FA_SLICE(dout, sdo, b), sdo[2], Tq, dv,
                           drows + b * Tq);
        }
#pragma omp for schedule(dynamic, 1)
        for (int64_t item = 0; item < items; item++) {
            const int64_t b = item / groups, g = item % groups;
            const int64_t t = table_heads == 1 ? 0 : b % H;
            const real *km = key_mask ? key_mask + (b / H) * Tk : NULL;
            const real *qs = FA_SLICE(q, sq, b);
            const real *dos = FA_SLICE(dout, sdo, b), *ks = FA_SLICE(k, sk, b);
            const real *vs = FA_SLICE(v, sv, b);
            real *dks = FA_SLICE(dkey, sdk, b), *dvs = FA_SLICE(dval, sdv, b);
            fa_rows ld = ld0;
            if (groups == 1)
                fa_rowsums(FA_SLICE(out, so, b), so[2], dos, ld.dout, Tq, dv, drows + b * Tq);
            if (qpack) {
                if (pb != b)
                    fa_pack(qs, ld.q, Tq, dk, qpack), fa_pack(dos, ld.dout, Tq, dv, dopack), pb = b;
                qs = qpack, dos = dopack, ld.q = dk, ld.dout = dv;
            }
            /* group 0 sums into dq, group g > 0 into its own contiguous partial dq: a query
             * block's first tile in the group sets its rows (seen: the blocks set so far),
             * and blocks that no tile of the group visits are zeroed at the end */
            real *dqs = FA_SLICE(dq, sdq, b);
            if (g > 0)
                dqs = dq_parts + ((g - 1) * B + b) * Tq * dk, ld.dq = dk;
            memset(seen, 0, sizeof(seen));
            /* the group's key blocks G at a time (fa_group): the tiles of each query block
             * that visits one of them, in increasing order, one after the other, so its rows
             * are read once for the G; each key block sees its query blocks in order */
            const int32_t gend = group_ptr[t * groups + g + 1];
            for (int32_t g0 = group_ptr[t * groups + g]; g0 < gend; g0 += (int32_t)G) {
                const int64_t members = gend - g0 < G ? gend - g0 : G;
                fa_kblock kbs[FA_GROUP];
                fa_visits vis[FA_GROUP]; /* each block's entries of rows */
                for (int64_t m = 0; m < members; m++) {
                    fa_kblock *kb = &kbs[m];
                    const int64_t c = group_cols[g0 + m];
                    kb->j0 = c * bk, kb->nc = Tk - kb->j0 < bk ? Tk - kb->j0 : bk;
                    kb->dk = dks + kb->j0 * ld.dk, kb->dv = dvs + kb->j0 * ld.dv;
                    kb->k = ks + kb->j0 * ld.k;
                    kb->lo = vis[m].e = col_ptr[t * nkb + c], vis[m].end = col_ptr[t * nkb + c + 1];
                    if (kb->lo == vis[m].end) { /* no query block sees this key block */
                        fa_zero_rows(kb->dk, kb->nc, dk, ld.dk);
                        fa_zero_rows(kb->dv, kb->nc, dv, ld.dv);
                        continue;
                    }
                    real *kt = fa_member_tiles(buf, m, dk, dv); /* then vt */
                    fa_transpose(kb->k, ld.k, kb->nc, dk, sc2, kt); /* scores come scaled */
                    fa_transpose(vs + kb->j0 * sv[2], sv[2], kb->nc, dv, 1, kt + dk * FA_LD);
                }
                for (int64_t r; (r = fa_next_visit(vis, members, rows)) != INT64_MAX;) {
                    const int64_t i0 = r * bq, nr = Tq - i0 < bq ? Tq - i0 : bq;
                    for (int64_t m = 0; m < members; m++) {
                        const fa_kblock *kb = &kbs[m];
                        const int first = vis[m].e == kb->lo;
                        if (!fa_take_visit(&vis[m], rows, r))
                            continue;
                        const int set = !(seen[r / 64] >> (r % 64) & 1);
                        w.kt = fa_member_tiles(buf, m, dk, dv), w.vt = w.kt + dk * FA_LD;
                        fa_bprop_tile(&w, &ld, qs + i0 * ld.q, kb->k, drows + b * Tq + i0,
                                      dos + i0 * ld.dout, lse + b * Tq + i0, dqs + i0 * ld.dq,
                                      kb->dk, kb->dv, dk, dv, nr, kb->nc, i0, kb->j0, off, causal,
                                      km, sc, drop ? &dr : NULL, b, H, Tq, Tk, first, set);
                        seen[r / 64] |= (uint64_t)1 << (r % 64);
                    }
                }
            }
            for (int64_t r = 0; r < nqb; r++)
                if (!(seen[r / 64] >> (r % 64) & 1))
                    fa_zero_rows(dqs + r * bq * ld.dq, Tq - r * bq < bq ? Tq - r * bq : bq, dk,
                                 ld.dq);
        }
        /* dq += the partials, in group order (a fixed order whatever the threads) */
        if (groups > 1) {
#pragma omp for schedule(static)
            for (int64_t x = 0; x < B * Tq; x++) {
                const int64_t b = x / Tq, i = x % Tq;
                real *row = FA_SLICE(dq, sdq, b) + i * sdq[2];
                for (int64_t g = 1; g < groups; g++) {
                    const real *part = dq_parts + ((g - 1) * B * Tq + x) * dk;
#pragma omp simd
                    for (int64_t d = 0; d < dk; d++)
                        row[d] += part[d];
                }
            }
        }
    }
}
