/* Masked, scaled softmax of attention scores and its gradient (see attention_softmax.h).
 * Hidden keys enter as -inf before the max, so the vectorizable NL_EXP gives them exactly 0;
 * a causal row is worked only up to its last visible key and zero-filled after it.  The row
 * reductions are `omp simd` loops, so they vectorize (in a fixed order for a given build). */
#include "no_fp_traps.h"
#include "common.h"
#include "attention_softmax.h"

/* One row of n visible-or-masked keys: o = softmax(s * x) with o[j] = 0 where mk[j] == 0. */
static void softmax_row(const real *x, real *o, int64_t n, real s, const real *mk)
{
    real top = -INFINITY;
    if (mk) {
#pragma omp simd reduction(max : top)
        for (int64_t j = 0; j < n; j++) {
            const real v = mk[j] != 0 ? s * x[j] : -INFINITY;
            o[j] = v;
            top = v > top ? v : top;
        }
    } else {
#pragma omp simd reduction(max : top)
        for (int64_t j = 0; j < n; j++) {
            const real v = s * x[j];
            o[j] = v;
            top = v > top ? v : top;
        }
    }
    if (top == -INFINITY) {
        memset(o, 0, (size_t)n * sizeof(real));
        return;
    }
    for (int64_t j = 0; j < n; j++)
        o[j] = NL_EXP(o[j] - top);
    double sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < n; j++)
        sum += o[j];
    const real inv = (real)(1.0 / sum);
    for (int64_t j = 0; j < n; j++)
        o[j] *= inv;
}

void attention_softmax_fprop(const real *x, real *out, int64_t B, int64_t Tq, int64_t Tk,
                             double scale, int causal, const real *key_mask, int64_t N)
{
    const int64_t group = key_mask ? B / N : 1, rows = B * Tq;
    const real s = (real)scale;
#pragma omp parallel for schedule(dynamic, nl_grain(Tk)) if (rows * Tk >= NL_PARALLEL_MIN)
    for (int64_t r = 0; r < rows; r++) {
        const int64_t b = r / Tq, i = r % Tq;
        int64_t n = Tk;
        if (causal) {
            const int64_t last = i + (Tk - Tq);
            n = last < 0 ? 0 : (last + 1 < Tk ? last + 1 : Tk);
        }
        real *o = out + r * Tk;
        softmax_row(x + r * Tk, o, n, s, key_mask ? key_mask + (b / group) * Tk : NULL);
        if (n < Tk)
            memset(o + n, 0, (size_t)(Tk - n) * sizeof(real));
    }
}

void attention_softmax_bprop(const real *y, const real *dy, real *dx, int64_t M, int64_t Tk,
                             double scale)
{
    const real s = (real)scale;
#pragma omp parallel for schedule(dynamic, nl_grain(Tk)) if (M * Tk >= NL_PARALLEL_MIN)
    for (int64_t m = 0; m < M; m++) {
        const real *yr = y + m * Tk, *dyr = dy + m * Tk;
        real *dxr = dx + m * Tk;
        double dot = 0;
#pragma omp simd reduction(+ : dot)
        for (int64_t j = 0; j < Tk; j++)
            dot += (double)dyr[j] * (double)yr[j];
        const real d = (real)dot;
        for (int64_t j = 0; j < Tk; j++)
            dxr[j] = s * yr[j] * (dyr[j] - d);
    }
}
