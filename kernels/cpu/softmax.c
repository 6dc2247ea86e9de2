/* Row softmax and fused softmax-cross-entropy (see softmax.h). */
#include "common.h"
#include "softmax.h"

/* shifted = x - max(x) for one row of K; returns log(sum(exp(shifted))). */
static double shifted_logsum(const real *x, real *shifted, int64_t K)
{
    real top = x[0];
    for (int64_t k = 1; k < K; k++)
        top = x[k] > top ? x[k] : top;
    double sum = 0;
    for (int64_t k = 0; k < K; k++) {
        shifted[k] = x[k] - top;
        sum += exp(shifted[k]);
    }
    return log(sum);
}

void softmax_rows(const real *x, real *out, int64_t M, int64_t K)
{
#pragma omp parallel for schedule(dynamic, nl_grain(K)) if (M * K >= NL_PARALLEL_MIN)
    for (int64_t m = 0; m < M; m++) {
        const real *xr = x + m * K;
        real *o = out + m * K;
        real top = xr[0];
        for (int64_t k = 1; k < K; k++)
            top = xr[k] > top ? xr[k] : top;
        double sum = 0;
        for (int64_t k = 0; k < K; k++) {
            o[k] = exp(xr[k] - top);
            sum += o[k];
        }
        const real inv = (real)(1.0 / sum);
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
        /* p holds the shifted logits, then log-probabilities, then probabilities. */
        const real logsum = (real)shifted_logsum(xr, p, K);
        double row = 0;
        for (int64_t k = 0; k < K; k++) {
            const real logp = p[k] - logsum;
            row += (double)t[k] * (double)logp;
            p[k] = exp(logp);
            g[k] = s * (p[k] - t[k]);
        }
        loss -= row;
    }
    return loss;
}
