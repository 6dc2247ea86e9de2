/* Fused attention: tiled online-softmax forward and a backward that recomputes each tile's
 * probabilities from the saved log-sum-exp (see flash_attention.h for the arguments).
 *
 * Forward: one OpenMP work item per (slice, query block).  For each visited key block the
 * scores S = q_r k_c^T (bq x bk) are made in a tile buffer, masked, and folded into the running
 * row maximum m and sum l; the output rows are rescaled by exp(m_old - m_new) and accumulate
 * P v_c, all in a per-thread buffer of bq x dv.  Nothing of size Tq x Tk exists.
 *
 * Backward: one work item per (slice, group of key blocks).  For each key block c of the group
 * (in order) and each query block r visiting it (in order): P = exp(scale q_r k_c^T - lse),
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

/* A thread's tiles start on a 64-byte boundary (FA_ALIGN reals of slack): the tile rows are
 * then aligned vectors, which a work array from a plain allocator does not guarantee. */
#define FA_ALIGN ((int64_t)(64 / sizeof(real)))

int64_t fa_work_size(int64_t dk, int64_t dv)
{
    return (dk + dv) * FA_LD + 4 * FA_MAX_BLOCK * FA_LD + FA_ALIGN;
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

void fa_fprop(const real *q, const real *k, const real *v, real *out, real *lse, int64_t B,
              int64_t H, int64_t Tq, int64_t Tk, int64_t dk, int64_t dv,
              const int64_t *strides, double scale, int causal, const real *key_mask,
              int64_t bq, int64_t bk, const int32_t *row_ptr, const int32_t *cols,
              int64_t table_heads, double keep, uint64_t seed, uint32_t step, uint32_t stream,
              uint64_t first, real *work, real *packed)
{
    const int64_t nqb = (Tq + bq - 1) / bq, off = Tk - Tq, items = B * nqb;
    const int drop = keep < 1.0;
    const fa_dropout dr = fa_make_dropout(drop ? keep : 1.0, seed, step, stream, first, H, Tq, Tk);
    const real sc2 = (real)(scale * FA_LOG2E);
#pragma omp parallel if (items > 1 && B * Tq * Tk * (dk + dv) >= NL_PARALLEL_MIN)
    {
        /* qt: the query block transposed (dk x nr); st: scores / probabilities transposed
         * (nc x nr), so the per-query steps run along vectors of queries */
        real *qt = fa_thread_work(work, dk, dv);
        real *st = qt + dk * FA_LD, *z = st + FA_MAX_BLOCK * FA_LD;
        real *acc = z + FA_MAX_BLOCK * FA_LD;
        real m[FA_MAX_BLOCK], l[FA_MAX_BLOCK], alpha[FA_MAX_BLOCK];
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
            const int64_t b = item / nqb, r = nqb - 1 - item % nqb, i0 = r * bq;
            const int64_t nr = Tq - i0 < bq ? Tq - i0 : bq;
            const int64_t t = table_heads == 1 ? 0 : b % H;
            const real *km = key_mask ? key_mask + (b / H) * Tk : NULL;
            const real *kb = FA_SLICE(k, sk, b), *vb = FA_SLICE(v, sv, b);
            int64_t ldk = sk[2], ldv = sv[2];
            /* keys from kend on are all hidden by the key mask (trailing padding): their
             * probabilities are exactly 0, so the tiles stop there */
            int64_t kend = Tk;
            while (km && kend > 0 && km[kend - 1] == 0)
                kend--;
            if (kpack) {
                if (pb != b)
                    fa_pack(kb, ldk, kend, dk, kpack), fa_pack(vb, ldv, kend, dv, vpack), pb = b;
                kb = kpack, vb = vpack, ldk = dk, ldv = dv;
            }
            fa_transpose(FA_SLICE(q, sq, b) + i0 * sq[2], sq[2], nr, dk, sc2, qt);
            for (int64_t i = 0; i < FA_MAX_BLOCK; i++)
                m[i] = -INFINITY, l[i] = 0;
            int set = 1; /* the first tile's P v_c sets acc */
            for (int32_t e = row_ptr[t * nqb + r]; e < row_ptr[t * nqb + r + 1]; e++) {
                const int64_t j0 = (int64_t)cols[e] * bk;
                if (j0 >= kend)
                    continue;
                const int64_t nc = kend - j0 < bk ? kend - j0 : bk;
                const fa_band keys = fa_causal_band(FA_ROWS_UPTO_COL, causal, i0, j0, nc, off);
                fa_gemm(nc, nr, dk, kb + j0 * ldk, ldk, 1, qt, FA_LD, st, FA_LD, 0, NULL, keys);
                fa_mask(st, 1, FA_LD, nr, nc, i0, j0, off, causal, km);
                fa_online_softmax(st, nr, nc, m, l, alpha, keys);
                if (drop) {
                    fa_dropout_tile(&dr, b, H, Tq, Tk, i0, nr, j0, nc, z, 1, FA_LD);
                    for (int64_t c = 0; c < nc; c++)
#pragma omp simd
                        for (int64_t i = 0; i < nr; i++)
                            st[c * FA_LD + i] *= z[c * FA_LD + i];
                }
                /* acc = acc alpha + P v_c (each row of acc rescaled as it is loaded) */
                fa_gemm(nr, dv, nc, st, 1, FA_LD, vb + j0 * ldv, ldv, acc, dv, !set, alpha,
                        fa_causal_band(FA_P_UPTO_ROW, causal, i0, j0, nc, off));
                set = 0;
            }
            if (set) /* no key seen */
                fa_zero_rows(acc, nr, dv, dv);
            for (int64_t i = 0; i < nr; i++) {
                real *o = FA_SLICE(out, so, b) + (i0 + i) * so[2];
                const real inv = l[i] > 0 ? 1 / l[i] : 0;
                for (int64_t d = 0; d < dv; d++)
                    o[d] = acc[i * dv + d] * inv;
                lse[b * Tq + i0 + i] = l[i] > 0 ? (real)(((double)m[i] + log2((double)l[i])) * FA_LN2)
                                               : -INFINITY;
            }
        }
    }
}

/* ---- backward --------------------------------------------------------------------------------- */
typedef struct {
    real *kt, *vt, *p, *dp, *z, *t;
} fa_bwork;

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
        real *buf = fa_thread_work(work, dk, dv);
        fa_bwork w = {buf, buf + dk * FA_LD, buf + (dk + dv) * FA_LD, NULL, NULL, NULL};
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
            for (int32_t gc = group_ptr[t * groups + g]; gc < group_ptr[t * groups + g + 1];
                 gc++) {
                const int64_t c = group_cols[gc];
                const int64_t j0 = c * bk, nc = Tk - j0 < bk ? Tk - j0 : bk;
                real *dkb = dks + j0 * ld.dk, *dvb = dvs + j0 * ld.dv;
                const int32_t lo = col_ptr[t * nkb + c], hi = col_ptr[t * nkb + c + 1];
                if (lo == hi) { /* no query block sees this key block */
                    fa_zero_rows(dkb, nc, dk, ld.dk);
                    fa_zero_rows(dvb, nc, dv, ld.dv);
                    continue;
                }
                const real *kb = ks + j0 * ld.k;
                fa_transpose(kb, ld.k, nc, dk, sc2, w.kt); /* scores come scaled */
                fa_transpose(vs + j0 * sv[2], sv[2], nc, dv, 1, w.vt);
                for (int32_t e = lo; e < hi; e++) {
                    const int64_t r = rows[e], i0 = r * bq, nr = Tq - i0 < bq ? Tq - i0 : bq;
                    const int set = !(seen[r / 64] >> (r % 64) & 1);
                    fa_bprop_tile(&w, &ld, qs + i0 * ld.q, kb, drows + b * Tq + i0,
                                  dos + i0 * ld.dout, lse + b * Tq + i0, dqs + i0 * ld.dq, dkb,
                                  dvb, dk, dv, nr, nc, i0, j0, off, causal, km, sc,
                                  drop ? &dr : NULL, b, H, Tq, Tk, e == lo, set);
                    seen[r / 64] |= (uint64_t)1 << (r % 64);
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
