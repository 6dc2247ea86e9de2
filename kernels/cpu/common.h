/* Shared by every CPU kernel source.
 *
 * The element type `real` is the DTYPE define (float or double; the build passes -DDTYPE=...),
 * and <tgmath.h> makes sqrt, exp, ... pick the float or double function to match it.
 * Accumulations over many elements (sums, statistics, losses) are done in double.
 * Loops run on OpenMP threads once they are big enough to repay starting a team.
 */
#ifndef NEONLITE_COMMON_H
#define NEONLITE_COMMON_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <tgmath.h>

#ifdef _OPENMP
#include <omp.h>
#define NL_MAX_THREADS() omp_get_max_threads()
#define NL_THREAD() omp_get_thread_num()
#define NL_NUM_THREADS() omp_get_num_threads()
#else
#define NL_MAX_THREADS() 1
#define NL_THREAD() 0
#define NL_NUM_THREADS() 1
#endif

#ifndef DTYPE
#error "compile with -DDTYPE=float or -DDTYPE=double"
#endif
typedef DTYPE real;

/* Loops over fewer elements than this run on one thread. */
#define NL_PARALLEL_MIN 32768

/* The half-open slice [*lo, *hi) of n items that thread `tid` of `nthreads` takes. */
static inline void nl_split(int64_t n, int tid, int nthreads, int64_t *lo, int64_t *hi)
{
    const int64_t base = n / nthreads, extra = n % nthreads;
    *lo = tid * base + (tid < extra ? tid : extra);
    *hi = *lo + base + (tid < extra ? 1 : 0);
}

/* dst = beta * dst for n elements (beta == 0 writes zeros, so old NaNs do not survive). */
static inline void nl_scale(real *dst, int64_t n, real beta)
{
    if (beta == 0) {
        memset(dst, 0, (size_t)n * sizeof(real));
    } else if (beta != 1) {
        for (int64_t i = 0; i < n; i++)
            dst[i] *= beta;
    }
}

#endif
