/* The two passes of the bilinear resize of augment.c (resample.py's definition): 22-bit
 * fixed-point taps, sums in int32 from 1 << 21, kept as clip8(sum >> 22).  Every product is
 * an exact integer and no sum can overflow (a pixel is at most 255 and the weights of one
 * output sum to about 1 << 22), so the order of the additions does not matter: the vector
 * forms give the scalar form's bits.  With AVX2 (what -march=native enables on the machine)
 * the passes run 8 int32 lanes at a time where the caller's `simd` says the CPU has it (1 or
 * more); elsewhere the compiler builds the scalar forms.
 * Included once, by augment.c. */
#ifndef NEONLITE_AUGMENT_RESAMPLE_H
#define NEONLITE_AUGMENT_RESAMPLE_H

#include <stdint.h>
#include <string.h>
#ifdef __AVX2__
#include <immintrin.h>
#endif

#define PRECISION_BITS 22
#define ROUNDING (1 << (PRECISION_BITS - 1))

static inline uint8_t clip8(int32_t acc)
{
    const int32_t v = acc >> PRECISION_BITS;
    return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

/* The horizontal pass of one row of C channels (C a constant where inlined): out[x, c] =
 * clip8(sum_k line[first[x] + k, c] * weights[x, k]) over the first `used` of the `taps`
 * (the others weigh 0); every tap lies inside the box (the tables are shifted so; see
 * resample_tables in kernels.py). */
static inline void horizontal_row(const uint8_t *line, uint8_t *out, int w, const int C,
                                  const int32_t *first, const int32_t *weights, int taps,
                                  int used)
{
    for (int x = 0; x < w; x++) {
        const uint8_t *p = line + (int64_t)first[x] * C;
        const int32_t *wk = weights + (int64_t)x * taps;
        int32_t acc[4] = {ROUNDING, ROUNDING, ROUNDING, ROUNDING};
        for (int k = 0; k < used; k++)
            for (int c = 0; c < C; c++)
                acc[c] += (int32_t)p[k * C + c] * wk[k];
        for (int c = 0; c < C; c++)
            out[x * C + c] = clip8(acc[c]);
    }
}

#ifdef __AVX2__
/* Four bytes at p (an RGB pixel and the byte after it) as the low 32 bits of a vector. */
static inline __m128i load4(const uint8_t *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return _mm_cvtsi32_si128(v);
}

/* Output pixels x and x + 1 of an RGB row, packed: the low 3 bytes of *px0 and *px1 (the
 * fourth is junk).  Two pixels per 256-bit vector (lanes 0-2 and 4-6; lanes 3 and 7 sum the
 * byte after each tap's pixel, which must be readable). */
static inline void rgb_pair(const uint8_t *line, const int32_t *first, const int32_t *weights,
                            int taps, int used, int x, int32_t *px0, int32_t *px1)
{
    const uint8_t *p0 = line + (int64_t)first[x] * 3, *p1 = line + (int64_t)first[x + 1] * 3;
    const int32_t *w0 = weights + (int64_t)x * taps, *w1 = w0 + taps;
    __m256i acc = _mm256_set1_epi32(ROUNDING);
    for (int k = 0; k < used; k++) {
        const __m128i pair = _mm_insert_epi32(load4(p0 + 3 * k),
                                              _mm_cvtsi128_si32(load4(p1 + 3 * k)), 1);
        const __m256i wk = _mm256_inserti128_si256(
            _mm256_castsi128_si256(_mm_set1_epi32(w0[k])), _mm_set1_epi32(w1[k]), 1);
        acc = _mm256_add_epi32(acc, _mm256_mullo_epi32(_mm256_cvtepu8_epi32(pair), wk));
    }
    acc = _mm256_srai_epi32(acc, PRECISION_BITS);
    const __m128i words = _mm_packs_epi32(_mm256_castsi256_si128(acc),
                                          _mm256_extracti128_si256(acc, 1));
    const __m128i bytes = _mm_packus_epi16(words, words);
    *px0 = _mm_cvtsi128_si32(bytes);
    *px1 = _mm_extract_epi32(bytes, 1);
}

/* The horizontal pass of an RGB row with rgb_pair.  Where `tail_room` is 0 (the box ends at
 * the image's last byte: its last row, at the right edge) the pairs with a tap on the box's
 * last pixel run scalar.  The outputs are made in the order that reads the source forwards
 * (from the right when the tables are mirrored for a flip, their `first` descending), which
 * the hardware prefetches best.  Forwards, each store writes a fourth byte, which the next
 * pixel's store (or the caller's next row) overwrites: `out` has room for one byte after the
 * row; backwards, the second pixel of a pair is stored in 3 bytes. */
static inline void horizontal_row_rgb(const uint8_t *line, uint8_t *out, int w,
                                      const int32_t *first, const int32_t *weights, int taps,
                                      int used, int bw, int tail_room)
{
    const int backwards = w > 1 && first[w - 1] < first[0];
    const int start = backwards ? w % 2 : 0, end = backwards ? w : w - w % 2;
    int32_t px0, px1;
    for (int i = 0; i < (end - start) / 2; i++) {
        const int x = backwards ? end - 2 - 2 * i : start + 2 * i;
        uint8_t *to = out + (int64_t)x * 3;
        if (!tail_room && (first[x] + used >= bw || first[x + 1] + used >= bw)) {
            horizontal_row(line, to, 2, 3, first + x, weights + (int64_t)x * taps, taps, used);
            continue;
        }
        rgb_pair(line, first, weights, taps, used, x, &px0, &px1);
        memcpy(to, &px0, 4);
        memcpy(to + 3, &px1, backwards ? 3 : 4);
    }
    if (w % 2) {
        const int x = backwards ? 0 : w - 1;
        horizontal_row(line, out + (int64_t)x * 3, 1, 3, first + x,
                       weights + (int64_t)x * taps, taps, used);
    }
}

/* Eight sums of the vertical pass starting at byte j: rows[k][j .. j + 7] * wk[k]. */
static inline __m256i vertical_sums(const uint8_t *const *rows, const int32_t *wk, int used,
                                    int64_t j)
{
    __m256i acc = _mm256_set1_epi32(ROUNDING);
    for (int k = 0; k < used; k++) {
        const __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(rows[k] + j)));
        acc = _mm256_add_epi32(acc, _mm256_mullo_epi32(v, _mm256_set1_epi32(wk[k])));
    }
    return _mm256_srai_epi32(acc, PRECISION_BITS);
}
#endif

/* The vertical pass of one output row: row[j] = clip8(sum_k rows[k][j] * wk[k]) for j <
 * row_len, over `used` source rows (uint8 rows of the horizontal pass); with AVX2 where
 * `simd` >= 1. */
static inline void vertical_row(const uint8_t *const *rows, const int32_t *wk, int used,
                                int64_t row_len, uint8_t *row, int simd)
{
    int64_t j = 0;
#ifdef __AVX2__
    for (; simd >= 1 && j + 16 <= row_len; j += 16) {
        const __m256i a = vertical_sums(rows, wk, used, j);
        const __m256i b = vertical_sums(rows, wk, used, j + 8);
        const __m256i words = _mm256_packs_epi32(a, b);   /* a0-3 b0-3 | a4-7 b4-7 */
        const __m256i bytes = _mm256_packus_epi16(words, words);
        const __m256i ordered = _mm256_permutevar8x32_epi32(
            bytes, _mm256_setr_epi32(0, 4, 1, 5, 0, 0, 0, 0));
        _mm_storeu_si128((__m128i *)(row + j), _mm256_castsi256_si128(ordered));
    }
#endif
    for (; j < row_len; j++) {
        int32_t acc = ROUNDING;
        for (int k = 0; k < used; k++)
            acc += (int32_t)rows[k][j] * wk[k];
        row[j] = clip8(acc);
    }
}

#endif
