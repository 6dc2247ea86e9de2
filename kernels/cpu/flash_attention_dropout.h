/* Dropout of the fused attention kernels (flash_attention.c includes this file; it is not a
 * cffi header): the Philox4x32-10 words of backends/philox.py and the dropout factors of a
 * tile, regenerated wherever a pass needs them.  Needs common.h (real) first. */
#ifndef NEONLITE_FLASH_ATTENTION_DROPOUT_H
#define NEONLITE_FLASH_ATTENTION_DROPOUT_H

/* Word `word` (0-3) of Philox4x32-10 at counter (g lo, g hi, step, stream) with key seed. */
static inline uint32_t fa_philox_word(uint64_t g, uint32_t step, uint32_t stream, uint64_t seed,
                                      int word)
{
    uint32_t c0 = (uint32_t)g, c1 = (uint32_t)(g >> 32), c2 = step, c3 = stream;
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int r = 0; r < 10; r++) {
        if (r)
            k0 += 0x9E3779B9u, k1 += 0xBB67AE85u;
        const uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
        const uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        c0 = n0, c1 = (uint32_t)p1, c2 = n2, c3 = (uint32_t)p0;
    }
    return word == 0 ? c0 : (word == 1 ? c1 : (word == 2 ? c2 : c3));
}

typedef struct {
    float keep;
    real scale;
    uint64_t seed, first, groups;
    uint32_t step, stream;
} fa_dropout;

/* z[r * zr + c * zc] = the dropout factor of row i0 + r, key j0 + c of slice b (r < nr,
 * c < nc). */
static void fa_dropout_tile(const fa_dropout *dr, int64_t b, int64_t H, int64_t Tq, int64_t Tk,
                            int64_t i0, int64_t nr, int64_t j0, int64_t nc, real *restrict z,
                            int64_t zr, int64_t zc)
{
    const uint64_t example = dr->first + (uint64_t)(b / H);
    const uint64_t base = (uint64_t)(b % H) * (uint64_t)(Tq * Tk);
    for (int64_t r = 0; r < nr; r++) {
        const uint64_t row = base + (uint64_t)((i0 + r) * Tk + j0);
        for (int64_t c = 0; c < nc; c++) {
            const uint64_t e = row + (uint64_t)c;
            const uint32_t w = fa_philox_word(example * dr->groups + e / 4, dr->step, dr->stream,
                                              dr->seed, (int)(e % 4));
            const float u = (float)(w >> 8) * (1.0f / 16777216.0f);
            z[r * zr + c * zc] = u < dr->keep ? dr->scale : 0;
        }
    }
}

static fa_dropout fa_make_dropout(double keep, uint64_t seed, uint32_t step, uint32_t stream,
                                  uint64_t first, int64_t H, int64_t Tq, int64_t Tk)
{
    fa_dropout dr = {(float)keep, (real)(1.0 / keep), seed, first,
                     (uint64_t)((H * Tq * Tk + 3) / 4), step, stream};
    return dr;
}

#endif
