/* Row softmax and fused softmax-cross-entropy (see softmax.h).  One exp per element, in the
 * vectorizable NL_EXP. */
#include "common.h"
#include "softmax.h"

/* e = exp(x - max(x)) for one row of K; returns the sum of e (in double) and sets *top. */
static double exp_row(const real *x, real *e, int64_t K, real *top)
{
    real m = x[0];
    for (int64_t k = 1; k < K; k++)
        m = x[k] > m ? x[k] : m;
    for (int64_t k = 0; k < K; k++)
        e[k] = NL_EXP(x[k] - m);
    double sum = 0;
    for (int64_t k = 0; k < K; k++)
        sum += e[k];
    *top = m;
    return sum;
}

void softmax_rows(const real *x, real *out, int64_t M, int64_t K)
{
#pragma omp parallel for schedule(dynamic, nl_grain(K)) if (M * K >= NL_PARALLEL_MIN)
    for (int64_t m = 0; m < M; m++) {
        real top;
        real *o = out + m * K;
        const real inv = (real)(1.0 / exp_row(x + m * K, o, K, &top));
        for (int64_t k = 0; k < K; k++)
            o[k] *= inv;
    }
}

double softmax_cross_entropy(const real *logits, const real *targets, real *probs, real *grad,
                             int64_t M, int64_t K, double scale)
{
    double loss = 0;
    const real s = (real)scale;
#pragma omp parallel for schedule(static) reduction(+ : loss) if (M * K >= NL_PARALLEL_MIN)
    for (int64_t m = 0; m < M; m++) {
        const real *xr = logits + m * K, *t = targets + m * K;
        real *p = probs + m * K, *g = grad + m * K;
        real top;
        const double sum = exp_row(xr, p, K, &top);
        const real logsum = (real)log(sum), inv = (real)(1.0 / sum);
        double row = 0;
        for (int64_t k = 0; k < K; k++) {
            row += (double)t[k] * (double)((xr[k] - top) - logsum);
            p[k] *= inv;
            g[k] = s * (p[k] - t[k]);
        }
        loss -= row;
    }
    return loss;
}

double softmax_cross_entropy_index(const real *logits, const int32_t *idx, real *probs,
                                   real *grad, int64_t M, int64_t K, double scale,
                                   int64_t *bad)
{
    *bad = -1;
    for (int64_t m = 0; m < M; m++)
        if (idx[m] < 0 || idx[m] >= K) {
            *bad = m;
            return NAN;
        }
    double loss = 0;
    const real s = (real)scale;
#pragma omp parallel for schedule(static) reduction(+ : loss) if (M * K >= NL_PARALLEL_MIN)
    for (int64_t m = 0; m < M; m++) {
        const real *xr = logits + m * K;
        real *p = probs + m * K, *g = grad + m * K;
        real top;
        const double sum = exp_row(xr, p, K, &top);
        const real logsum = (real)log(sum), inv = (real)(1.0 / sum);
        const int64_t c = idx[m];
        for (int64_t k = 0; k < K; k++) {
            p[k] *= inv;
            g[k] = s * p[k];
        }
        g[c] = s * (p[c] - (real)1);
        loss -= (double)((xr[c] - top) - logsum);
    }
    return loss;
}
