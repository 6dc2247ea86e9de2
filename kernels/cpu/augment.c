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

#define PRECISION_BITS 22

/* One output row of `count` uint8 values to row `y` of sample i's output, converted. */
static void store_row(const uint8_t *row, void *dst, int64_t y, int64_t count, int channels,
                      int out_kind, const double *scale, const double *shift)
{
    if (out_kind == 0) {
        memcpy((uint8_t *)dst + y * count, row, (size_t)count);
    } else if (out_kind == 1) {
        float *out = (float *)dst + y * count;
        for (int64_t k = 0; k < count; k++) {
            const int c = (int)(k % channels);
            out[k] = (float)row[k] * (float)scale[c] + (float)shift[c];
        }
    } else {
        double *out = (double *)dst + y * count;
        for (int64_t k = 0; k < count; k++) {
            const int c = (int)(k % channels);
            out[k] = (double)row[k] * scale[c] + shift[c];
        }
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
        uint8_t *row = malloc((size_t)w * C);
        if (!row) {
            failed++;
            continue;
        }
        for (int y = 0; y < h; y++) {
            const int sy = top[i] + y;
            if (sy < 0 || sy >= H) {
                memset(row, fill, (size_t)w * C);
            } else {
                const uint8_t *line = src[i] + (int64_t)sy * W * C;
                for (int x = 0; x < w; x++) {
                    const int sx = left[i] + (flip[i] ? w - 1 - x : x);
                    if (sx < 0 || sx >= W)
                        memset(row + x * C, fill, (size_t)C);
                    else
                        memcpy(row + x * C, line + (int64_t)sx * C, (size_t)C);
                }
            }
            store_row(row, dst[i], y, (int64_t)w * C, C, out_kind, scale, shift);
        }
        free(row);
    }
    return failed;
}

static inline uint8_t clip8(int64_t acc)
{
    const int64_t v = acc >> PRECISION_BITS;
    return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

int aug_resize(const real *const *src, const int32_t *src_hw, void *const *dst,
                const int32_t *dst_hw, int64_t n, int channels, const int32_t *box,
                const int32_t *first_y, const int32_t *weights_y, int stride_y, int taps_y,
                const int32_t *first_x, const int32_t *weights_x, int stride_x, int taps_x,
                const uint8_t *flip, int out_kind, const double *scale, const double *shift)
{
    int failed = 0;
#pragma omp parallel for schedule(dynamic, 1) reduction(+ : failed)
    for (int64_t i = 0; i < n; i++) {
        const int W = src_hw[2 * i + 1], C = channels;
        const int top = box[4 * i], left = box[4 * i + 1], bh = box[4 * i + 2], bw = box[4 * i + 3];
        const int h = dst_hw[2 * i], w = dst_hw[2 * i + 1];
        const int32_t *fx = first_x + i * stride_x, *fy = first_y + i * stride_y;
        const int32_t *wx = weights_x + i * stride_x * taps_x;
        const int32_t *wy = weights_y + i * stride_y * taps_y;
        uint8_t *tmp = malloc((size_t)bh * w * C), *row = malloc((size_t)w * C);
        if (!tmp || !row) {
            free(tmp);
            free(row);
            failed++;
            continue;
        }
        for (int y = 0; y < bh; y++) {
            const uint8_t *line = src[i] + ((int64_t)(top + y) * W + left) * C;
            uint8_t *out = tmp + (int64_t)y * w * C;
            for (int x = 0; x < w; x++) {
                for (int c = 0; c < C; c++) {
                    int64_t acc = 1 << (PRECISION_BITS - 1);
                    for (int k = 0; k < taps_x; k++) {
                        const int sx = fx[x] + k < bw ? fx[x] + k : bw - 1;
                        acc += (int64_t)line[sx * C + c] * wx[x * taps_x + k];
                    }
                    out[x * C + c] = clip8(acc);
                }
            }
        }
        for (int y = 0; y < h; y++) {
            for (int x = 0; x < w; x++) {
                const int ox = flip[i] ? w - 1 - x : x;
                for (int c = 0; c < C; c++) {
                    int64_t acc = 1 << (PRECISION_BITS - 1);
                    for (int k = 0; k < taps_y; k++) {
                        const int sy = fy[y] + k < bh ? fy[y] + k : bh - 1;
                        acc += (int64_t)tmp[((int64_t)sy * w + x) * C + c] * wy[y * taps_y + k];
                    }
                    row[ox * C + c] = clip8(acc);
                }
            }
            store_row(row, dst[i], y, (int64_t)w * C, C, out_kind, scale, shift);
        }
        free(tmp);
        free(row);
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
