/* The tap tables of the bilinear resize (resample.py's bilinear_taps, in C: the same double
 * operations in the same order, so the same 22-bit weights), made by aug_resize for each
 * sample and axis.  Included once, by augment.c (after augment_resample.h: PRECISION_BITS).
 *
 * A box of `length` input pixels resized to `out`: output o has its centre at c = (o + 0.5)
 * * s (s = length / out), the taps first .. first + count - 1 with first = max(trunc(c - r +
 * 0.5), 0), count = min(trunc(c + r + 0.5), length) - first, r = max(s, 1), of weights
 * 1 - |(first + k - c + 0.5) / r| (those above 0), divided by their sum (summed in tap
 * order) and stored as trunc(w * 2^22 + 0.5).  Each output has `taps` = 2 ceil(r) + 1 slots
 * (the unused ones weigh 0).  Where the box is at least `taps` long, an output whose slots
 * would reach past it is shifted left (its weights move right by as much), so that every
 * slot the passes read lies inside the box; a left-right flip is the outputs in reverse
 * order.  None of this changes a sum: the extra slots weigh 0. */
#ifndef NEONLITE_AUGMENT_TABLES_H
#define NEONLITE_AUGMENT_TABLES_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Tables of one sample and axis: first (out,), weights (out, taps), used (one past the last
 * slot of any output that weighs anything, at least 1); memory holds both. */
struct taps {
    int taps, used;
    int32_t *first, *weights;
    void *memory;
};

static int taps_count(int length, int out)
{
    const double scale = (double)length / (double)out;
    const double support = scale > 1.0 ? scale : 1.0;
    return (int)ceil(support) * 2 + 1;
}

static void taps_free(struct taps *t)
{
    free(t->memory);
    t->memory = NULL;
}

/* Make `t` for a box of `length` resized to `out`, mirrored when `mirror`.  0, or -1 when
 * out of memory. */
static int taps_make(struct taps *t, int length, int out, int mirror)
{
    const int K = taps_count(length, out);
    const double scale = (double)length / (double)out;
    const double filterscale = scale > 1.0 ? scale : 1.0, support = filterscale;
    double *w = malloc((size_t)K * sizeof(double));
    t->memory = malloc((size_t)out * sizeof(int32_t) * (size_t)(K + 1));
    if (!w || !t->memory) {
        free(w);
        taps_free(t);
        return -1;
    }
    t->taps = K;
    t->used = 1;
    t->first = (int32_t *)t->memory;
    t->weights = t->first + out;
    for (int o = 0; o < out; o++) {
        const double centre = ((double)o + 0.5) * scale;
        int64_t first = (int64_t)(centre - support + 0.5);
        int64_t last = (int64_t)(centre + support + 0.5);
        first = first > 0 ? first : 0;
        last = last < length ? last : length;
        const int64_t count = last - first;
        double total = 0.0;
        for (int k = 0; k < K; k++) {
            const double v = 1.0 - fabs(((double)(first + k) - centre + 0.5) / filterscale);
            w[k] = k < count && v > 0.0 ? v : 0.0;
            total += w[k];
        }
        int64_t shift = first + K - length;
        shift = K <= length && shift > 0 ? shift : 0;
        const int row = mirror ? out - 1 - o : o;
        int32_t *fixed = t->weights + (int64_t)row * K;
        t->first[row] = (int32_t)(first - shift);
        for (int k = 0; k < K; k++) {
            const int from = k - (int)shift;
            const double v = from < 0 ? 0.0 : total != 0.0 ? w[from] / total : w[from];
            fixed[k] = from < 0 ? 0 : (int32_t)(int64_t)(v * (double)(1 << PRECISION_BITS) +
                                                           0.5);
            if (fixed[k] != 0 && k + 1 > t->used)
                t->used = k + 1;
        }
    }
    free(w);
    return 0;
}

#endif
