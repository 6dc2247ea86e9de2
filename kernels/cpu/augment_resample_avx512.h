/* The bilinear resize passes of augment.c with AVX-512 (F, BW, VL and VBMI): the same 22-bit
 * fixed-point sums as augment_resample.h, the same bits.  Built where the compiler enables
 * those sets (-march=native on such a machine: NL_RESIZE_AVX512 is 1); aug_resize runs them
 * only when its caller says the CPU has them (the `simd` argument, from the CPU flags at run
 * time), else the passes of augment_resample.h.  Included once, by augment.c, after
 * augment_resample.h.
 *
 * Horizontal pass.  The outputs of a row are cut into blocks of B = 16 / C pixels (5 for RGB:
 * 15 of the 16 int32 lanes, one per output value).  A block's taps lie in a window of at most
 * 64 bytes of the box row, loaded once (a masked load: nothing past the window is read);
 * for each pair of taps (2p, 2p + 1) one VPERMB puts, in the 16-bit halves of every lane, the
 * two source bytes that lane needs (zero-extended), and VPMADDWD multiplies them by the two
 * taps' weights.  A 22-bit weight does not fit 16 bits, so it is split, w = hi * 2^11 + lo
 * (0 <= lo < 2^11), and the lane sums sum(p * hi) * 2^11 + sum(p * lo) + 2^21: the scalar
 * sum exactly (no int32 overflows: a pixel is at most 255 and a lane's weights sum to about
 * 2^22).  The windows, byte indices and split weights of every block are made once per
 * sample (an hplan) and serve each of its rows.
 *
 * Vertical pass.  16 values per step: the rows' bytes widened to int32 and multiplied by the
 * row's weight (VPMULLD), and the sum stored as uint8, or converted to float and normalised
 * (x * scale[c] + shift[c], a multiply then an add, as store_row: the same bits), straight
 * into the output row. */
#ifndef NEONLITE_AUGMENT_RESAMPLE_AVX512_H
#define NEONLITE_AUGMENT_RESAMPLE_AVX512_H

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && \
    defined(__AVX512VBMI__)
#define NL_RESIZE_AVX512 1
#include <immintrin.h>
#include <stdlib.h>

#define HSPLIT_BITS 11
#define HWINDOW 64

/* One pair of taps of one block: the byte of the window each 16-bit half of each lane takes
 * (idx) and the halves' weights, split (whi, wlo; int16). */
struct hpair {
    uint8_t idx[64];
    int16_t whi[32];
    int16_t wlo[32];
};

/* The horizontal pass of one sample: `blocks` blocks of `per_block` output pixels, `pairs`
 * tap pairs each; block b reads the window at byte start[b] of the box row (load[b]: its
 * bytes), writes bytes b * per_block * C .. of the output row (store[b]: how many lanes). */
struct hplan {
    int blocks, pairs, per_block, channels;
    int32_t *start;
    __mmask64 *load;
    __mmask16 *store;
    struct hpair *pair;    /* blocks * pairs, block-major */
    void *memory;
};

static void hplan_free(struct hplan *plan)
{
    free(plan->memory);
    plan->memory = NULL;
}

/* The plan of the horizontal pass for output width w, C channels, tables first (w,) and
 * weights (w, taps) of which `used` can weigh anything, and a box bw pixels wide (taps read
 * at min(first + k, bw - 1), as horizontal_row_any).  Returns 1 when made, 0 when no block
 * size fits its windows in 64 bytes or C > 16 (then the caller runs the other passes), -1
 * when out of memory. */
static int hplan_make(struct hplan *plan, int w, int C, const int32_t *first,
                      const int32_t *weights, int taps, int used, int bw)
{
    const int pairs = (used + 1) / 2;
    int per_block = C <= 16 ? 16 / C : 0;
    for (; per_block > 0; per_block--) {
        int fits = 1;
        for (int x0 = 0; x0 < w && fits; x0 += per_block) {
            int lo = bw, hi = 0;
            for (int x = x0; x < x0 + per_block && x < w; x++) {
                const int a = first[x] < bw - 1 ? first[x] : bw - 1;
                const int b = first[x] + used < bw ? first[x] + used : bw;
                lo = a < lo ? a : lo;
                hi = b > hi ? b : hi;
            }
            fits = (hi - lo) * C <= HWINDOW;
        }
        if (fits)
            break;
    }
    if (per_block == 0 || pairs == 0)
        return 0;
    const int blocks = (w + per_block - 1) / per_block;
    const size_t pair_bytes = (size_t)blocks * (size_t)pairs * sizeof(struct hpair);
    const size_t head = (size_t)blocks * (sizeof(int32_t) + sizeof(__mmask64) +
                                          sizeof(__mmask16));
    char *memory = aligned_alloc(64, pair_bytes + ((head + 63) / 64) * 64);
    if (!memory)
        return -1;
    plan->memory = memory;
    plan->pair = (struct hpair *)memory;
    plan->load = (__mmask64 *)(memory + pair_bytes);
    plan->start = (int32_t *)(plan->load + blocks);
    plan->store = (__mmask16 *)(plan->start + blocks);
    plan->blocks = blocks;
    plan->pairs = pairs;
    plan->per_block = per_block;
    plan->channels = C;
    for (int b = 0; b < blocks; b++) {
        const int x0 = b * per_block;
        const int n = w - x0 < per_block ? w - x0 : per_block;
        int lo = bw, hi = 0;
        for (int x = x0; x < x0 + n; x++) {
            const int a = first[x] < bw - 1 ? first[x] : bw - 1;
            const int e = first[x] + used < bw ? first[x] + used : bw;
            lo = a < lo ? a : lo;
            hi = e > hi ? e : hi;
        }
        const int window = (hi - lo) * C;
        plan->start[b] = lo * C;
        plan->load[b] = window >= 64 ? ~(__mmask64)0 : (((__mmask64)1 << window) - 1);
        plan->store[b] = (__mmask16)((1u << (n * C)) - 1);
        for (int p = 0; p < pairs; p++) {
            struct hpair *pair = plan->pair + (size_t)b * pairs + p;
            memset(pair, 0, sizeof *pair);
            for (int lane = 0; lane < n * C; lane++) {
                const int x = x0 + lane / C, c = lane % C;
                for (int half = 0; half < 2; half++) {
                    const int k = 2 * p + half;
                    int sx = first[x] + k < bw - 1 ? first[x] + k : bw - 1;
                    int32_t wk = k < used ? weights[(int64_t)x * taps + k] : 0;
                    if (sx < lo || sx >= hi) {   /* a tap past `used` (weight 0) */
                        sx = lo;
                        wk = 0;
                    }
                    pair->idx[4 * lane + 2 * half] = (uint8_t)((sx - lo) * C + c);
                    pair->whi[2 * lane + half] = (int16_t)(wk >> HSPLIT_BITS);
                    pair->wlo[2 * lane + half] = (int16_t)(wk & ((1 << HSPLIT_BITS) - 1));
                }
            }
        }
    }
    return 1;
}

static inline __m512i madd_add(__m512i acc, __m512i a, __m512i b)
{
#ifdef __AVX512VNNI__
    return _mm512_dpwssd_epi32(acc, a, b);
#else
    return _mm512_add_epi32(acc, _mm512_madd_epi16(a, b));
#endif
}

/* Row `line` (the box row's first byte) through `plan` into out (w * C bytes, no more
 * written). */
static inline void horizontal_row_avx512(const uint8_t *line, uint8_t *out,
                                         const struct hplan *plan)
{
    const __mmask64 halves = 0x5555555555555555ull;   /* the low byte of each 16-bit half */
    const int step = plan->per_block * plan->channels, pairs = plan->pairs;
    const struct hpair *pair = plan->pair;
    for (int b = 0; b < plan->blocks; b++, pair += pairs) {
        const __m512i window = _mm512_maskz_loadu_epi8(plan->load[b], line + plan->start[b]);
        __m512i hi = _mm512_setzero_si512(), lo = _mm512_setzero_si512();
        for (int p = 0; p < pairs; p++) {
            const __m512i two = _mm512_maskz_permutexvar_epi8(
                halves, _mm512_load_si512((const void *)pair[p].idx), window);
            hi = madd_add(hi, two, _mm512_load_si512((const void *)pair[p].whi));
            lo = madd_add(lo, two, _mm512_load_si512((const void *)pair[p].wlo));
        }
        __m512i sum = _mm512_add_epi32(_mm512_slli_epi32(hi, HSPLIT_BITS), lo);
        sum = _mm512_srai_epi32(_mm512_add_epi32(sum, _mm512_set1_epi32(ROUNDING)),
                                PRECISION_BITS);
        sum = _mm512_max_epi32(sum, _mm512_setzero_si512());
        _mm_mask_storeu_epi8(out + (int64_t)b * step, plan->store[b],
                             _mm512_cvtusepi32_epi8(sum));
    }
}

/* Sixteen sums of the vertical pass at byte j (`mask`: which of the 16 are read), shifted
 * and clipped below at 0 (above by the store). */
static inline __m512i vertical_sums16(const uint8_t *const *rows, const int32_t *wk, int used,
                                      int64_t j, __mmask16 mask)
{
    __m512i acc = _mm512_set1_epi32(ROUNDING);
    for (int k = 0; k < used; k++) {
        const __m512i v = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(mask, rows[k] + j));
        acc = _mm512_add_epi32(acc, _mm512_mullo_epi32(v, _mm512_set1_epi32(wk[k])));
    }
    return _mm512_max_epi32(_mm512_srai_epi32(acc, PRECISION_BITS), _mm512_setzero_si512());
}

/* The vertical pass of one output row (row_len values), stored to `dst` as uint8
 * (out_kind 0) or as float32 x * scale[c] + shift[c] (out_kind 1; reps: scale and shift
 * repeated over C + 16 values, as floats). */
static inline void vertical_row_avx512(const uint8_t *const *rows, const int32_t *wk, int used,
                                       int64_t row_len, int C, int out_kind, void *dst,
                                       const float *scale_reps, const float *shift_reps)
{
    const int advance = 16 % C;
    int phase = 0;   /* the channel of value j */
    for (int64_t j = 0; j < row_len; j += 16, phase += advance, phase -= phase >= C ? C : 0) {
        const __mmask16 mask = row_len - j >= 16 ? (__mmask16)0xFFFF :
            (__mmask16)((1u << (row_len - j)) - 1);
        const __m512i sum = vertical_sums16(rows, wk, used, j, mask);
        if (out_kind == 0) {
            _mm_mask_storeu_epi8((uint8_t *)dst + j, mask, _mm512_cvtusepi32_epi8(sum));
        } else {
            const __m512i byte = _mm512_min_epi32(sum, _mm512_set1_epi32(255));
            __m512 v = _mm512_mul_ps(_mm512_cvtepi32_ps(byte),
                                     _mm512_loadu_ps(scale_reps + phase));
            v = _mm512_add_ps(v, _mm512_loadu_ps(shift_reps + phase));
            _mm512_mask_storeu_ps((float *)dst + j, mask, v);
        }
    }
}

#else
#define NL_RESIZE_AVX512 0
#endif

#endif
