/* The fused attention forward pass, written once for the element type of its operands
 * (flash_attention.c includes this file twice; it is not a cffi header, and has no include
 * guard): FA_BF16 0 (FA_T real) defines fa_fprop, FA_BF16 1 (FA_T uint16_t: bf16 bit
 * patterns) fa_fprop_bf16.  The tiles are the same; with bf16 operands k and v are widened
 * into the thread's packed rows a key block at a time (the first time one of the thread's
 * tiles of the slice reads it), q a query block at a time before its transpose, and the
 * output rows rounded from the accumulator (flash_attention_bf16.h). */

void FA_NAME(fa_fprop)(const FA_T *q, const FA_T *k, const FA_T *v, FA_T *out, real *lse,
                       int64_t B, int64_t H, int64_t Tq, int64_t Tk, int64_t dk, int64_t dv,
                       const int64_t *strides, double scale, int causal, const real *key_mask,
                       int64_t bq, int64_t bk, const int32_t *row_ptr, const int32_t *cols,
                       int64_t table_heads, double keep, uint64_t seed, uint32_t step,
                       uint32_t stream, uint64_t first, real *work, real *packed)
{
    const int64_t nqb = (Tq + bq - 1) / bq, nkb = (Tk + bk - 1) / bk, off = Tk - Tq;
    /* a work item: a group of G query blocks (fa_group: the keys and values they share) */
    const int64_t G = fa_group(Tk, dk + dv, nqb), ngroups = (nqb + G - 1) / G;
    const int64_t items = B * ngroups;
    const int drop = keep < 1.0;
    const fa_dropout dr = fa_make_dropout(drop ? keep : 1.0, seed, step, stream, first, H, Tq, Tk);
    const real sc2 = (real)(scale * FA_LOG2E);
    (void)nkb;
#pragma omp parallel if (items > 1 && B * Tq * Tk * (dk + dv) >= NL_PARALLEL_MIN)
    {
        /* each block's qt and acc, then st and z: the scores / probabilities transposed (nc x
         * nr), so the per-query steps run along vectors of queries */
        real *buf = fa_thread_work(work, FA_NAME(fa_work_size)(dk, dv));
        fa_qblock qbs[FA_GROUP];
        fa_visits vis[FA_GROUP]; /* each block's entries of cols */
        for (int64_t g = 0; g < G; g++)
            qbs[g].qt = fa_member_tiles(buf, g, dk, dv), qbs[g].acc = qbs[g].qt + dk * FA_LD;
        fa_keys kv = {.st = fa_member_tiles(buf, G, dk, dv)};
        kv.z = kv.st + FA_MAX_BLOCK * FA_LD;
        const int64_t *sq = strides, *sk = strides + 3, *sv = strides + 6, *so = strides + 9;
#if FA_BF16
        /* the slice's k and v rows widened into kpack, vpack (contiguous) as key blocks are
         * first read (`widened`: the blocks of slice pb there now); a query block's rows into
         * qrows before its transpose */
        real *kpack = fa_thread_pack(packed, fa_pack_size_bf16(Tq, Tk, dk, dv));
        real *qrows = fa_bf16_staging(buf, dk, dv);
        uint64_t widened[nkb / 64 + 1];
#else
        /* strided k and v rows: the slice's copied to kpack, vpack (contiguous) when more
         * than one query block reads them and the slice is long; slice pb's are there now */
        const int pack = nqb > 1 && Tk > FA_PACK_ROWS && (sk[2] != dk || sv[2] != dv);
        real *kpack = pack ? fa_thread_pack(packed, fa_pack_size(Tq, Tk, dk, dv)) : NULL;
#endif
        real *vpack = kpack ? kpack + Tk * dk : NULL;
        int64_t pb = -1;
#pragma omp for schedule(dynamic, 1)
        for (int64_t item = 0; item < items; item++) {
            /* the last query blocks first: under a causal mask they visit the most tiles */
            const int64_t b = item / ngroups, r0 = (ngroups - 1 - item % ngroups) * G;
            const int64_t members = nqb - r0 < G ? nqb - r0 : G;
            const int64_t t = table_heads == 1 ? 0 : b % H;
            const FA_T *ks = FA_SLICE(k, sk, b), *vs = FA_SLICE(v, sv, b);
            kv.b = b, kv.km = key_mask ? key_mask + (b / H) * Tk : NULL;
            /* keys from kend on are all hidden by the key mask (trailing padding): their
             * probabilities are exactly 0, so the tiles stop there */
            kv.kend = Tk;
            while (kv.km && kv.kend > 0 && kv.km[kv.kend - 1] == 0)
                kv.kend--;
#if FA_BF16
            if (pb != b)
                memset(widened, 0, sizeof(widened)), pb = b;
            kv.kb = kpack, kv.vb = vpack, kv.ldk = dk, kv.ldv = dv;
#else
            kv.kb = ks, kv.vb = vs, kv.ldk = sk[2], kv.ldv = sv[2];
            if (kpack) {
                if (pb != b) {
                    fa_pack(kv.kb, kv.ldk, kv.kend, dk, kpack);
                    fa_pack(kv.vb, kv.ldv, kv.kend, dv, vpack), pb = b;
                }
                kv.kb = kpack, kv.vb = vpack, kv.ldk = dk, kv.ldv = dv;
            }
#endif
            for (int64_t g = 0; g < members; g++) {
                fa_qblock *qb = &qbs[g];
                const int64_t r = r0 + g;
                const FA_T *qr;
                qb->i0 = r * bq, qb->nr = Tq - qb->i0 < bq ? Tq - qb->i0 : bq;
                qr = FA_SLICE(q, sq, b) + qb->i0 * sq[2];
#if FA_BF16
                fa_widen_rows(qr, sq[2], qb->nr, dk, qrows, dk);
                fa_transpose(qrows, dk, qb->nr, dk, sc2, qb->qt);
#else
                fa_transpose(qr, sq[2], qb->nr, dk, sc2, qb->qt);
#endif
                for (int64_t i = 0; i < FA_MAX_BLOCK; i++)
                    qb->m[i] = -INFINITY, qb->l[i] = 0;
                qb->set = 1;
                vis[g].e = row_ptr[t * nqb + r], vis[g].end = row_ptr[t * nqb + r + 1];
            }
            /* the key blocks the group visits, in increasing order (each block's in its
             * order), each tile of a key block right after the last: read once from memory */
            for (int64_t c; (c = fa_next_visit(vis, members, cols)) != INT64_MAX;) {
                const int64_t j0 = c * bk, nc = kv.kend - j0 < bk ? kv.kend - j0 : bk;
#if FA_BF16
                if (j0 < kv.kend && !fa_bit(widened, c)) {
                    fa_widen_rows(ks + j0 * sk[2], sk[2], nc, dk, kpack + j0 * dk, dk);
                    fa_widen_rows(vs + j0 * sv[2], sv[2], nc, dv, vpack + j0 * dv, dv);
                    fa_set_bit(widened, c);
                }
#endif
                for (int64_t g = 0; g < members; g++)
                    if (fa_take_visit(&vis[g], cols, c) && j0 < kv.kend)
                        fa_fprop_tile(&qbs[g], &kv, j0, nc, dk, dv, off, causal,
                                      drop ? &dr : NULL, H, Tq, Tk);
            }
            for (int64_t g = 0; g < members; g++) {
                FA_T *o = FA_SLICE(out, so, b) + qbs[g].i0 * so[2];
                real *l = lse + b * Tq + qbs[g].i0;
#if FA_BF16
                /* the output rows made in place of the accumulator, then rounded */
                fa_fprop_finish(&qbs[g], qbs[g].acc, dv, l, dv);
                fa_narrow_rows(qbs[g].acc, dv, qbs[g].nr, dv, o, so[2]);
#else
                fa_fprop_finish(&qbs[g], o, so[2], l, dv);
#endif
            }
        }
    }
}
