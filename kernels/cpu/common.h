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

#ifndef DTYPE
#error "compile with -DDTYPE=float or -DDTYPE=double"
#endif
typedef DTYPE real;

/* Loops over fewer elements than this run on one thread. */
#define NL_PARALLEL_MIN 32768

/* Elementwise loops hand out their iterations dynamically, about NL_GRAIN elements at a time,
 * so that a thread the OS has descheduled (the machine is shared with BLAS threads and other
 * processes) delays the loop by one grain, not by its whole static share. */
#define NL_GRAIN 16384

/* Iterations per dynamic chunk for a loop whose iterations touch `per_item` elements each. */
static inline int nl_grain(int64_t per_item)
{
    const int64_t n = per_item > 0 ? NL_GRAIN / per_item : NL_GRAIN;
    return n < 1 ? 1 : (int)n;
}

/* The half-open slice [*lo, *hi) of n items that part `part` of `nparts` covers. */
static inline void nl_split(int64_t n, int64_t part, int64_t nparts, int64_t *lo, int64_t *hi)
{
    const int64_t base = n / nparts, extra = n % nparts;
    *lo = part * base + (part < extra ? part : extra);
    *hi = *lo + base + (part < extra ? 1 : 0);
}

/* Sums over many rows cut the rows into a fixed number of blocks (fewer when there are fewer
 * rows), each summed into its own slot; the slots are added in block order.  The result then
 * depends neither on the number of threads nor on which thread took which block, and threads
 * can take blocks dynamically. */
#define NL_BLOCKS 32
static inline int64_t nl_blocks(int64_t rows)
{
    return rows < 1 ? 1 : (rows < NL_BLOCKS ? rows : NL_BLOCKS);
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
