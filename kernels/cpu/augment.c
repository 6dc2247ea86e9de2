/* Augmentation kernels on uint8 images (see augment.h).  Floating-point steps must round as
 * numpy does, one operation at a time: no fused multiply-add. */
#pragma GCC optimize("fp-contract=off")
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifndef DTYPE
#error "compile with -DDTYPE=uint8_t"
#endif
typedef DTYPE real;

#include "augment.h"
#include "augment_resample.h"
#include "augment_resample_avx512.h"
#include "augment_tables.h"

int aug_simd_built(void)
{
#if NL_RESIZE_AVX512
    return 2;
#elif defined(__AVX2__)
    return 1;
#else
    return 0;
#endif
}

/* Values per block of the float stores: a multiple of 1, 2, 3, 4 and 8 channels. */
#define PATTERN 24

/* One output row of `count` uint8 values (pixels of `channels`) to row `y` of sample i's
 * output, converted to out_kind. */
static void store_row(const uint8_t *row, void *dst, int64_t y, int64_t count, int channels,
                      int out_kind, const double *scale, const double *shift)
{
    const int C = channels;
    const int64_t pixels = count / C;
    if (out_kind == 0) {
        memcpy((uint8_t *)dst + y * count, row, (size_t)count);
    } else if (out_kind == 1) {
        float *out = (float *)dst + y * count;
        if (PATTERN % C == 0) {
            /* the per-channel factors repeated over PATTERN values, so the loop over a
             * block is one the compiler vectorises (no fused multiply-add: same bits) */
            float s[PATTERN], t[PATTERN];
            for (int k = 0; k < PATTERN; k++) {
                s[k] = (float)scale[k % C];
                t[k] = (float)shift[k % C];
            }
            int64_t j = 0;
            for (; j + PATTERN <= count; j += PATTERN)
                for (int k = 0; k < PATTERN; k++)
                    out[j + k] = (float)row[j + k] * s[k] + t[k];
            for (; j < count; j++)
                out[j] = (float)row[j] * s[j % PATTERN] + t[j % PATTERN];
        } else {
            for (int c = 0; c < C; c++) {
                const float sc = (float)scale[c], tc = (float)shift[c];
                for (int64_t p = 0; p < pixels; p++)
                    out[p * C + c] = (float)row[p * C + c] * sc + tc;
            }
        }
    } else {
        double *out = (double *)dst + y * count;
        for (int c = 0; c < C; c++)
            for (int64_t p = 0; p < pixels; p++)
                out[p * C + c] = (double)row[p * C + c] * scale[c] + shift[c];
    }
}

/* Row y of a crop: pixels left .. left + w - 1 of source row `line` (NULL: outside the image)
 * of width W, `fill` outside, mirrored when `flip`. */
static void crop_row(const uint8_t *line, int W, int left, int w, int C, int flip, int fill,
                     uint8_t *row)
{
    const int64_t bytes = (int64_t)w * C;
    if (!line) {
        memset(row, fill, (size_t)bytes);
        return;
    }
    const int x0 = left < 0 ? -left : 0;
    const int x1 = left + w > W ? W - left : w;
    if (x0 > 0 || x1 < w)
        memset(row, fill, (size_t)bytes);
    if (x1 <= x0)
        return;
    const uint8_t *from = line + (int64_t)(left + x0) * C;
    if (!flip) {
        memcpy(row + (int64_t)x0 * C, from, (size_t)(x1 - x0) * C);
    } else if (C == 3) {
        for (int x = x0; x < x1; x++) {
            uint8_t *to = row + (int64_t)(w - 1 - x) * 3;
            const uint8_t *p = from + (int64_t)(x - x0) * 3;
            to[0] = p[0];
            to[1] = p[1];
            to[2] = p[2];
        }
    } else {
        for (int x = x0; x < x1; x++)
            memcpy(row + (int64_t)(w - 1 - x) * C, from + (int64_t)(x - x0) * C, (size_t)C);
    }
}

int aug_crop(const real *const *src, const int32_t *src_hw, void *const *dst,
             const int32_t *dst_hw, int64_t n, int channels, const int32_t *top,
             const int32_t *left, const uint8_t *flip, int fill, int out_kind,
             const double *scale, const double *shift)
{
    int failed = 0;
#pragma omp parallel for schedule(dynamic, 1) reduction(+ : failed)
    for (int64_t i = 0; i < n; i++) {
        const int H = src_hw[2 * i], W = src_hw[2 * i + 1];
        const int h = dst_hw[2 * i], w = dst_hw[2 * i + 1], C = channels;
        const int64_t bytes = (int64_t)w * C;
        uint8_t *row = out_kind == 0 ? NULL : malloc((size_t)bytes);
        if (out_kind != 0 && !row) {
            failed++;
            continue;
        }
        for (int y = 0; y < h; y++) {
            const int sy = top[i] + y;
            const uint8_t *line = sy < 0 || sy >= H ? NULL : src[i] + (int64_t)sy * W * C;
            uint8_t *to = row ? row : (uint8_t *)dst[i] + y * bytes;
            crop_row(line, W, left[i], w, C, flip[i], fill, to);
            if (row)
                store_row(row, dst[i], y, bytes, C, out_kind, scale, shift);
        }
        free(row);
    }
    return failed;
}

/* The same for any channel count, reading tap first[x] + k at min(first[x] + k, bw - 1) (a
 * box narrower than the taps: the taps past it weigh 0). */
static void horizontal_row_any(const uint8_t *line, uint8_t *out, int w, int C,
                               const int32_t *first, const int32_t *weights, int taps, int bw)
{
    for (int x = 0; x < w; x++) {
        const int32_t *wk = weights + (int64_t)x * taps;
        for (int c = 0; c < C; c++) {
            int32_t acc = 1 << (PRECISION_BITS - 1);
            for (int k = 0; k < taps; k++) {
                const int sx = first[x] + k < bw ? first[x] + k : bw - 1;
                acc += (int32_t)line[(int64_t)sx * C + c] * wk[k];
            }
            out[x * C + c] = clip8(acc);
        }
    }
}

/* Sample i's horizontal pass into tmp (bh rows of row_len bytes, one byte of room after
 * them) with the passes of augment_resample.h. */
static void horizontal_pass(const uint8_t *image, int H, int W, int C, int top, int left,
                            int bh, int bw, int w, const int32_t *fx, const int32_t *wx,
                            int taps_x, int used_x, int simd, uint8_t *tmp)
{
    const int64_t row_len = (int64_t)w * C;
    for (int y = 0; y < bh; y++) {
        const uint8_t *line = image + ((int64_t)(top + y) * W + left) * C;
        uint8_t *out = tmp + (int64_t)y * row_len;
        if (C == 3 && taps_x <= bw && simd >= 1)
#ifdef __AVX2__
            horizontal_row_rgb(line, out, w, fx, wx, taps_x, used_x, bw,
                               top + y < H - 1 || left + bw < W);
#else
            horizontal_row(line, out, w, 3, fx, wx, taps_x, used_x);
#endif
        else if (C == 3 && taps_x <= bw)
            horizontal_row(line, out, w, 3, fx, wx, taps_x, used_x);
        else if (C == 1 && taps_x <= bw)
            horizontal_row(line, out, w, 1, fx, wx, taps_x, used_x);
        else
            horizontal_row_any(line, out, w, C, fx, wx, taps_x, bw);
    }
}

int aug_resize(const real *const *src, const int32_t *src_hw, void *const *dst,
               const int32_t *dst_hw, int64_t n, int channels, const int32_t *box,
               const uint8_t *flip, int out_kind, const double *scale, const double *shift,
               int simd)
{
    int failed = 0;
    const int C = channels;
    const int wide = NL_RESIZE_AVX512 && simd >= 2 && C <= 16;
    float scale_reps[32], shift_reps[32];
    for (int k = 0; k < 32; k++) {
        scale_reps[k] = (float)scale[k % C];
        shift_reps[k] = (float)shift[k % C];
    }
#pragma omp parallel for schedule(dynamic, 1) reduction(+ : failed)
    for (int64_t i = 0; i < n; i++) {
        const int H = src_hw[2 * i], W = src_hw[2 * i + 1];
        const int top = box[4 * i], left = box[4 * i + 1], bh = box[4 * i + 2];
        const int bw = box[4 * i + 3];
        const int h = dst_hw[2 * i], w = dst_hw[2 * i + 1];
        const int64_t row_len = (int64_t)w * C;
        struct taps ty = {0}, tx = {0};
        const int made = taps_make(&ty, bh, h, 0) == 0 && taps_make(&tx, bw, w, flip[i]) == 0;
        uint8_t *tmp = made ? malloc((size_t)(bh * row_len + row_len + 1)) : NULL;
        const uint8_t **rows = made ? malloc((size_t)ty.taps * sizeof(*rows)) : NULL;
        int planned = 0;
#if NL_RESIZE_AVX512
        struct hplan plan = {0};
        if (wide && tmp && rows)
            planned = hplan_make(&plan, w, C, tx.first, tx.weights, tx.taps, tx.used, bw);
#endif
        if (!tmp || !rows || planned < 0) {
            free(tmp);
            free(rows);
            taps_free(&ty);
            taps_free(&tx);
            failed++;
            continue;
        }
        uint8_t *row = tmp + bh * row_len;
#if NL_RESIZE_AVX512
        if (planned) {
            for (int y = 0; y < bh; y++)
                horizontal_row_avx512(src[i] + ((int64_t)(top + y) * W + left) * C,
                                      tmp + (int64_t)y * row_len, &plan);
            hplan_free(&plan);
        } else
#endif
            horizontal_pass(src[i], H, W, C, top, left, bh, bw, w, tx.first, tx.weights,
                            tx.taps, tx.used, simd, tmp);
        for (int y = 0; y < h; y++) {
            const int32_t *wy = ty.weights + (int64_t)y * ty.taps;
            for (int k = 0; k < ty.used; k++) {
                const int sy = ty.first[y] + k < bh ? ty.first[y] + k : bh - 1;
                rows[k] = tmp + (int64_t)sy * row_len;
            }
#if NL_RESIZE_AVX512
            if (wide && out_kind <= 1) {
                void *to = out_kind == 0 ? (void *)((uint8_t *)dst[i] + y * row_len) :
                    (void *)((float *)dst[i] + y * row_len);
                vertical_row_avx512(rows, wy, ty.used, row_len, C, out_kind, to, scale_reps,
                                    shift_reps);
                continue;
            }
#endif
            vertical_row(rows, wy, ty.used, row_len, row, simd);
            store_row(row, dst[i], y, row_len, C, out_kind, scale, shift);
        }
        free(tmp);
        free(rows);
        taps_free(&ty);
        taps_free(&tx);
    }
    return failed;
}

static inline uint8_t round8(float v)
{
    v = rintf(v);
    return (uint8_t)(v < 0.0f ? 0.0f : v > 255.0f ? 255.0f : v);
}

static inline int64_t grey_of(const uint8_t *p, int C)
{
    if (C == 1)
        return p[0];
    return (299 * (int64_t)p[0] + 587 * (int64_t)p[1] + 114 * (int64_t)p[2] + 500) / 1000;
}

int aug_jitter(const real *const *src, const int32_t *src_hw, void *const *dst, int64_t n,
                int channels, const float *factors, int out_kind, const double *scale,
                const double *shift)
{
    int failed = 0;
#pragma omp parallel for schedule(dynamic, 1) reduction(+ : failed)
    for (int64_t i = 0; i < n; i++) {
        const int64_t H = src_hw[2 * i], W = src_hw[2 * i + 1], C = channels;
        const int64_t pixels = H * W, count = pixels * C;
        const float b = factors[3 * i], c = factors[3 * i + 1], s = factors[3 * i + 2];
        uint8_t *img = malloc((size_t)count);
        if (!img) {
            failed++;
            continue;
        }
        memcpy(img, src[i], (size_t)count);
        if (b != 1.0f)
            for (int64_t k = 0; k < count; k++)
                img[k] = round8((float)img[k] * b);
        if (c != 1.0f) {
            int64_t sum = 0;
            for (int64_t p = 0; p < pixels; p++)
                sum += grey_of(img + p * C, (int)C);
            const float mean = (float)((double)sum / (double)pixels), part = (1.0f - c) * mean;
            for (int64_t k = 0; k < count; k++)
                img[k] = round8((float)img[k] * c + part);
        }
        if (s != 1.0f) {
            const float one_minus_s = 1.0f - s;
            for (int64_t p = 0; p < pixels; p++) {
                const float g = (float)grey_of(img + p * C, (int)C), part = one_minus_s * g;
                for (int64_t k = 0; k < C; k++)
                    img[p * C + k] = round8((float)img[p * C + k] * s + part);
            }
        }
        for (int64_t y = 0; y < H; y++)
            store_row(img + y * W * C, dst[i], y, W * C, (int)C, out_kind, scale, shift);
        free(img);
    }
    return failed;
}
