/* The per-tile steps of the fused attention forward's softmax (flash_attention.c includes this
 * file after flash_attention_tiles.h; it is not a cffi header): fa_mask sets the scores of
 * hidden keys to -inf, fa_online_softmax folds a key block's scores into each query's running
 * maximum and sum. */
#ifndef NEONLITE_FLASH_ATTENTION_SOFTMAX_H
#define NEONLITE_FLASH_ATTENTION_SOFTMAX_H

/* s[r * sr + c * sc] (r < nr queries from i0, c < nc keys from j0) = -inf where the key is
 * hidden (causal, key mask); the scores come scaled (one operand was).  A tile with nothing
 * hidden is left as it is. */
static void fa_mask(real *restrict s, int64_t sr, int64_t sc, int64_t nr, int64_t nc,
                    int64_t i0, int64_t j0, int64_t off, int causal, const real *km)
{
    if (!km && (!causal || j0 + nc - 1 <= i0 + off))
        return;
    if (sc == 1) { /* a row per query: along the keys */
        for (int64_t r = 0; r < nr; r++) {
            real *row = s + r * sr;
            /* keys past this column are after the query (causal) */
            const int64_t last = causal ? i0 + r + off - j0 : nc;
            if (km) {
#pragma omp simd
                for (int64_t c = 0; c < nc; c++) {
                    const int hide = km[j0 + c] == 0 || c > last;
                    row[c] = hide ? -INFINITY : row[c];
                }
            } else {
#pragma omp simd
                for (int64_t c = last < 0 ? 0 : last + 1; c < nc; c++)
                    row[c] = -INFINITY;
            }
        }
        return;
    }
    for (int64_t c = 0; c < nc; c++) {
        const int64_t j = j0 + c;
        /* the query rows before `first` do not see key j: all when it is padded */
        int64_t first = km && km[j] == 0 ? nr : (causal ? j - off - i0 : 0);
        first = first > nr ? nr : first;
#pragma omp simd
        for (int64_t r = 0; r < first; r++)
            s[r * sr + c * sc] = -INFINITY;
    }
}

/* One key block's step of the online softmax.  s (nc keys x nr queries, ld FA_LD) holds the
 * scaled scores (base 2), -inf where hidden; m, l the running maximum and sum of each query.
 * Afterwards s holds 2^(s - m_new), l = l alpha + rowsum, m = m_new and alpha =
 * 2^(m_old - m_new), the factor the output rows take.  The queries go FA_W at a time (one
 * vector; lanes past nr are computed and not used), their keys a sequential loop, so the
 * maximum and the sum stay in registers.  m, l, alpha: room for nr rounded up to FA_W.
 * Under the causal band of the tile (bd, FA_ROWS_UPTO_COL) a vector of queries stops at the
 * last key that one query of its FA_ROWS-query block sees (the block of the banded product
 * with v): the keys after it are hidden from all (their 2^(s - m) = 0 add nothing), and s is
 * left as it was there (the product with v, banded, does not read it). */
static void fa_online_softmax(real *restrict s, int64_t nr, int64_t nc, real *restrict m,
                              real *restrict l, real *restrict alpha, fa_band bd)
{
    for (int64_t v = 0; v < nr; v += FA_W) {
        /* the keys that some query of the vector sees are among the first kc; with vectors
         * narrower than FA_ROWS (AVX2 and double: 4 lanes) up to those of the FA_ROWS-query
         * block around it, which the banded product with v reads whole */
        int64_t kc = nc;
        if (bd.kind != FA_FULL) {
            kc = (v + FA_W + FA_ROWS - 1) / FA_ROWS * FA_ROWS + bd.e;
            kc = kc < 0 ? 0 : (kc > nc ? nc : kc);
        }
        /* four running maxima (keys c mod 4), so the maximum is not one chain of kc steps */
        real top[FA_W], t1[FA_W], t2[FA_W], t3[FA_W], safe[FA_W], sum[FA_W];
#pragma omp simd
        for (int64_t x = 0; x < FA_W; x++)
            top[x] = t1[x] = t2[x] = t3[x] = m[v + x];
        int64_t c = 0;
        for (; c + 4 <= kc; c += 4) {
            const real *row = s + c * FA_LD + v;
#pragma omp simd
            for (int64_t x = 0; x < FA_W; x++) {
                top[x] = row[x] > top[x] ? row[x] : top[x];
                t1[x] = row[FA_LD + x] > t1[x] ? row[FA_LD + x] : t1[x];
                t2[x] = row[2 * FA_LD + x] > t2[x] ? row[2 * FA_LD + x] : t2[x];
                t3[x] = row[3 * FA_LD + x] > t3[x] ? row[3 * FA_LD + x] : t3[x];
            }
        }
        for (; c < kc; c++) {
            const real *row = s + c * FA_LD + v;
#pragma omp simd
            for (int64_t x = 0; x < FA_W; x++)
                top[x] = row[x] > top[x] ? row[x] : top[x];
        }
#pragma omp simd
        for (int64_t x = 0; x < FA_W; x++) {
            t1[x] = t2[x] > t1[x] ? t2[x] : t1[x];
            t3[x] = top[x] > t3[x] ? top[x] : t3[x];
            top[x] = t3[x] > t1[x] ? t3[x] : t1[x];
        }
#pragma omp simd
        for (int64_t x = 0; x < FA_W; x++) {
            /* queries with nothing visible yet keep m = -inf and take exp(-inf) = 0 */
            safe[x] = top[x] == -INFINITY ? 0 : top[x];
            alpha[v + x] = FA_EXP2(m[v + x] - safe[x]);
            sum[x] = l[v + x] * alpha[v + x];
            m[v + x] = top[x];
        }
        const fa_vec base = fa_load(safe);
        fa_vec total = fa_load(sum);
        for (c = 0; c < kc; c++) {
            real *row = s + c * FA_LD + v;
            const fa_vec p = fa_vexp2(fa_load(row) - base);
            fa_store(row, p);
            total += p;
        }
        fa_store(l + v, total);
    }
}

#endif
