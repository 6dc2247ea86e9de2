/* The fused attention backward pass, written once for the element type of its operands
 * (flash_attention.c includes this file twice; it is not a cffi header, and has no include
 * guard): FA_BF16 0 (FA_T real) defines fa_bprop, FA_BF16 1 (FA_T uint16_t: bf16 bit
 * patterns) fa_bprop_bf16.  The tiles and every sum are the same; with bf16 operands
 * (flash_attention_bf16.h):
 *   q and dout are widened into the thread's packed rows, the whole slice at once when it is
 *   one work item, else a query block at a time, the first time one of the thread's tiles of
 *   the slice reads it; out is widened for the row sums;
 *   k and v a key block at a time before their transposes (k's rows kept for dQ);
 *   dK and dV are summed in a key block's own float rows, rounded into dk, dv when its
 *   visits are done; dQ in the thread's float rows of the slice (one group) or in the
 *   partials (several groups, all of them float: dq_parts holds `groups` of them), rounded
 *   into dq once complete. */

void FA_NAME(fa_bprop)(const FA_T *q, const FA_T *k, const FA_T *v, const FA_T *out,
                       const real *lse, const FA_T *dout, FA_T *dq, FA_T *dkey, FA_T *dval,
                       int64_t B, int64_t H, int64_t Tq, int64_t Tk, int64_t dk, int64_t dv,
                       const int64_t *strides, double scale, int causal, const real *key_mask,
                       int64_t bq, int64_t bk, const int32_t *col_ptr, const int32_t *rows,
                       int64_t table_heads, double keep, uint64_t seed, uint32_t step,
                       uint32_t stream, uint64_t first, int64_t groups,
                       const int32_t *group_ptr, const int32_t *group_cols, real *dq_parts,
                       real *drows, real *work, real *packed)
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
        real *buf = fa_thread_work(work, FA_NAME(fa_work_size)(dk, dv));
#if FA_BF16
        /* the tiles read the float rows: q, dout and dQ of the slice in the packed rows
         * (`widened`: the query blocks of slice pb there now), k, dK and dV of each key block
         * in its staging (fa_bf16_staging), v's rows in vrows before their transpose */
        const fa_rows ld0 = {dk, dk, dv, dk, dk, dv};
        real *qpack = fa_thread_pack(packed, fa_pack_size_bf16(Tq, Tk, dk, dv));
        real *dopack = qpack + Tq * dk, *dqacc = dopack + Tq * dv;
        real *staging = fa_bf16_staging(buf, dk, dv);
        real *vrows = staging + FA_GROUP * FA_MAX_BLOCK * (2 * dk + dv);
        uint64_t widened[nqb / 64 + 1];
#else
        const fa_rows ld0 = {sq[2], sk[2], sdo[2], sdq[2], sdk[2], sdv[2]};
        /* strided q and dout rows: the slice's copied to qpack, dopack (contiguous) when more
         * than one key block reads them and the slice is long; slice pb's are there now */
        const int pack = nkb > 1 && Tq > FA_PACK_ROWS && (sq[2] != dk || sdo[2] != dv);
        real *qpack = pack ? fa_thread_pack(packed, fa_pack_size(Tq, Tk, dk, dv)) : NULL;
        real *dopack = qpack ? qpack + Tq * dk : NULL;
#endif
        int64_t pb = -1;
        const size_t tile = FA_MAX_BLOCK * FA_LD;
        uint64_t seen[nqb / 64 + 1]; /* a bit per query block */
        /* each key block's kt and vt (fa_member_tiles; w's while its tiles run), then the
         * tiles they share */
        fa_bwork w = {NULL, NULL, fa_member_tiles(buf, G, dk, dv), NULL, NULL, NULL};
        w.dp = w.p + tile, w.z = w.dp + tile, w.t = w.z + tile;
        /* D = rowsum(dO * O) of every query row, once: here when a slice has several work
         * items, else by the slice's item */
        if (groups > 1) {
#pragma omp for schedule(static)
            for (int64_t b = 0; b < B; b++)
                FA_NAME(fa_rowsums)(FA_SLICE(out, so, b), so[2], FA_SLICE(dout, sdo, b), sdo[2],
                                    Tq, dv, drows + b * Tq);
        }
#pragma omp for schedule(dynamic, 1)
        for (int64_t item = 0; item < items; item++) {
            const int64_t b = item / groups, g = item % groups;
            const int64_t t = table_heads == 1 ? 0 : b % H;
            const real *km = key_mask ? key_mask + (b / H) * Tk : NULL;
            const FA_T *qsl = FA_SLICE(q, sq, b), *dosl = FA_SLICE(dout, sdo, b);
            const FA_T *ks = FA_SLICE(k, sk, b), *vs = FA_SLICE(v, sv, b);
            FA_T *dks = FA_SLICE(dkey, sdk, b), *dvs = FA_SLICE(dval, sdv, b);
            fa_rows ld = ld0;
#if FA_BF16
            const real *qs = qpack, *dos = dopack;
            if (pb != b)
                memset(widened, 0, sizeof(widened)), pb = b;
            if (groups == 1) {
                /* the slice's only item: its q and dout rows widened at once (long runs of
                 * loads), D from the widened dout; its k, v and out rows asked for along the
                 * way (a row of each a widened row: not all at once, which stalls on the
                 * misses in flight), so they arrive while the widening runs */
                const int ahead = Tk <= FA_PACK_ROWS; /* k, v, out rows fit in L2 */
                for (int64_t r = 0; r < Tq || r < Tk; r++) {
                    if (ahead && r < Tk) {
                        fa_prefetch_rows(ks + r * sk[2], 0, 1, dk);
                        fa_prefetch_rows(vs + r * sv[2], 0, 1, dv);
                    }
                    if (r < Tq) {
                        if (ahead)
                            fa_prefetch_rows(FA_SLICE(out, so, b) + r * so[2], 0, 1, dv);
                        fa_widen_rows(qsl + r * sq[2], 0, 1, dk, qpack + r * dk, dk);
                        fa_widen_rows(dosl + r * sdo[2], 0, 1, dv, dopack + r * dv, dv);
                    }
                }
                memset(widened, 0xff, sizeof(widened));
                fa_rowsums_bf16_from(FA_SLICE(out, so, b), so[2], NULL, 0, dopack, Tq, dv,
                                     drows + b * Tq);
            }
            /* dQ: the thread's float rows of the slice (one group) or group g's partial */
            real *dqs = groups > 1 ? dq_parts + (g * B + b) * Tq * dk : dqacc;
#else
            if (groups == 1)
                fa_rowsums(FA_SLICE(out, so, b), so[2], dosl, sdo[2], Tq, dv, drows + b * Tq);
            const real *qs = qsl, *dos = dosl;
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
#endif
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
                    real *kt = fa_member_tiles(buf, m, dk, dv); /* then vt */
                    kb->j0 = c * bk, kb->nc = Tk - kb->j0 < bk ? Tk - kb->j0 : bk;
#if FA_BF16
                    real *kf = staging + m * FA_MAX_BLOCK * (2 * dk + dv);
                    kb->k = kf, kb->dk = kf + FA_MAX_BLOCK * dk;
                    kb->dv = kb->dk + FA_MAX_BLOCK * dk;
#else
                    kb->dk = dks + kb->j0 * ld.dk, kb->dv = dvs + kb->j0 * ld.dv;
                    kb->k = ks + kb->j0 * ld.k;
#endif
                    kb->lo = vis[m].e = col_ptr[t * nkb + c], vis[m].end = col_ptr[t * nkb + c + 1];
                    if (kb->lo == vis[m].end) { /* no query block sees this key block */
                        fa_zero_rows(kb->dk, kb->nc, dk, ld.dk);
                        fa_zero_rows(kb->dv, kb->nc, dv, ld.dv);
                        continue;
                    }
#if FA_BF16
                    fa_widen_rows(ks + kb->j0 * sk[2], sk[2], kb->nc, dk, kf, dk);
                    fa_transpose(kf, dk, kb->nc, dk, sc2, kt); /* scores come scaled */
                    fa_widen_rows(vs + kb->j0 * sv[2], sv[2], kb->nc, dv, vrows, dv);
                    fa_transpose(vrows, dv, kb->nc, dv, 1, kt + dk * FA_LD);
#else
                    fa_transpose(kb->k, ld.k, kb->nc, dk, sc2, kt); /* scores come scaled */
                    fa_transpose(vs + kb->j0 * sv[2], sv[2], kb->nc, dv, 1, kt + dk * FA_LD);
#endif
                }
                for (int64_t r; (r = fa_next_visit(vis, members, rows)) != INT64_MAX;) {
                    const int64_t i0 = r * bq, nr = Tq - i0 < bq ? Tq - i0 : bq;
#if FA_BF16
                    if (!fa_bit(widened, r)) {
                        fa_widen_rows(qsl + i0 * sq[2], sq[2], nr, dk, qpack + i0 * dk, dk);
                        fa_widen_rows(dosl + i0 * sdo[2], sdo[2], nr, dv, dopack + i0 * dv, dv);
                        fa_set_bit(widened, r);
                    }
#endif
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
#if FA_BF16
                for (int64_t m = 0; m < members; m++) { /* dK, dV of the blocks, complete */
                    const fa_kblock *kb = &kbs[m];
                    fa_narrow_rows(kb->dk, dk, kb->nc, dk, dks + kb->j0 * sdk[2], sdk[2]);
                    fa_narrow_rows(kb->dv, dv, kb->nc, dv, dvs + kb->j0 * sdv[2], sdv[2]);
                }
#endif
            }
            for (int64_t r = 0; r < nqb; r++)
                if (!(seen[r / 64] >> (r % 64) & 1))
                    fa_zero_rows(dqs + r * bq * ld.dq, Tq - r * bq < bq ? Tq - r * bq : bq, dk,
                                 ld.dq);
#if FA_BF16
            if (groups == 1)
                fa_narrow_rows(dqs, dk, Tq, dk, FA_SLICE(dq, sdq, b), sdq[2]);
#endif
        }
        /* dq (+)= the partials, in group order (a fixed order whatever the threads) */
        if (groups > 1) {
#pragma omp for schedule(static)
            for (int64_t x = 0; x < B * Tq; x++) {
                const int64_t b = x / Tq, i = x % Tq;
                FA_T *row = FA_SLICE(dq, sdq, b) + i * sdq[2];
#if FA_BF16
                real sum[FA_MAX_WIDTH];
                memcpy(sum, dq_parts + x * dk, (size_t)dk * sizeof(real));
#else
                real *sum = row;
#endif
                for (int64_t g = 1; g < groups; g++) {
                    const real *part = dq_parts + ((g - 1 + FA_BF16) * B * Tq + x) * dk;
#pragma omp simd
                    for (int64_t d = 0; d < dk; d++)
                        sum[d] += part[d];
                }
#if FA_BF16
                fa_narrow_rows(sum, dk, 1, dk, row, dk);
#endif
            }
        }
    }
}
