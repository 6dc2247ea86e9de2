/* Convolution passes on bfloat16 operands with bf16 arithmetic (conv_compute.c): the tiled
 * passes of conv.h with each tile's product on a bf16 GEMM (VDPBF16PS or AMX TDPBF16PS,
 * float32 accumulation) instead of sgemm on widened operands.
 *
 * Layouts as conv.h's (NHWC images x (N, H, W, C), filters f (R, S, C, K), outputs o and
 * output gradients e (N, P, Q, K), weight gradient df (R, S, C, K)), every operand bf16 bits
 * (uint16).  `gemm` is the address of a bf16 GEMM with nl_gemm_bf16_to's signature
 * (gemm_bf16.h), called on one thread per tile with the tile's slice of the work for its
 * packing buffers (`gemm_work` bytes, nl_gemm_bf16_work_bytes(..., 1) or more); its sums are
 * float32 and in one fixed order, so the result does not depend on the thread count.
 *
 *   conv_fprop_compute:  o = round(patches(x) @ f (+ bias, ReLU)), a tile's rows of patches
 *                        gathered as bf16 bits, the product into float32 staging, its
 *                        epilogue there, rounded once;
 *   conv_update_compute: df = round(beta * df + patches(x)^T @ e), block b of the output rows
 *                        (conv_update_blocks) summed in float32 into partials[b] (R*S*C*K
 *                        floats each), the partials added in double in block order;
 *   conv_bprop_compute:  dx = round(beta * dx + col2im(e @ f^T)), one image per thread, its
 *                        patches' gradients added into a float32 image, rounded once.
 *
 * work: conv_compute_work_bytes(g, nwork, tile, gemm_work) bytes on a 64-byte boundary;
 * nwork threads, `tile` output rows (of Q patches) per GEMM.  bias (K bf16) may be NULL.
 * Each pass returns 0, or the most negative status a tile's GEMM returned. */
#ifndef NEONLITE_CONV_COMPUTE_H
#define NEONLITE_CONV_COMPUTE_H

#include "../conv_geom.h"

int64_t conv_compute_work_bytes(const conv_geom *g, int64_t nwork, int64_t tile,
                                int64_t gemm_work);
int conv_fprop_compute(const uint16_t *x, const uint16_t *f, uint16_t *o, const conv_geom *g,
                        int64_t gemm, void *work, int64_t gemm_work, int64_t nwork,
                        int64_t tile, const uint16_t *bias, int relu);
int conv_update_compute(const uint16_t *x, const uint16_t *e, uint16_t *df,
                         const conv_geom *g, int64_t gemm, void *work, int64_t gemm_work,
                         int64_t nwork, int64_t tile, float *partials, float beta);
int conv_bprop_compute(const uint16_t *e, const uint16_t *f, uint16_t *dx,
                        const conv_geom *g, int64_t gemm, void *work, int64_t gemm_work,
                        int64_t nwork, int64_t tile, float beta);

#endif
