/* The fused attention on bfloat16 operands with bf16 arithmetic (attention_compute.c): the
 * products on a bf16 GEMM (VDPBF16PS or AMX TDPBF16PS, float32 accumulation), the softmax and
 * its gradient in float32, for the CPU backend's compute path.
 *
 * Slices, layouts and masks as the flash attention kernels take them (flash_attention.h) and
 * as the numpy reference (backends/reference/attention.py) defines them: B = N * heads slices,
 * slice b of example b / heads; an operand's row i of slice b at
 *     x + (b / heads) * s[0] + (b % heads) * s[1] + i * s[2]
 * with its three strides s (elements) in `strides` (q, k, v, out, then dout, dq, dk, dv for
 * the backward pass), rows contiguous; q (Tq, dk), k (Tk, dk), v (Tk, dv), out and dout
 * (Tq, dv), all bf16 bits; lse (B, Tq) float32, contiguous.  Key j is hidden from query i
 * where causal and j > i + Tk - Tq, or where mask (N, Tk float32, or NULL) is 0 at
 * (b / heads, j); a row with every key hidden has lse -inf and output 0.  No dropout and no
 * block layout (the caller runs those elsewhere).
 *
 *   att_fprop_compute: per (slice, block of ATT_BQ queries): S = scale q k^T (the causally
 *     visible keys only) on the GEMM into float32, the row softmax in float32 (lse kept),
 *     P rounded to bf16, out = P v on the GEMM, rounded to bf16 in its epilogue;
 *   att_bprop_compute: per slice (one thread): for each query block, P recomputed from lse
 *     (float32, rounded to bf16 for the products), dv += P^T dout, dP = dout v^T,
 *     D = rowsum(dout * out), dS = P (dP - D) scale rounded to bf16, dq = dS k (rounded in
 *     the GEMM's epilogue), dk += dS^T q; dk and dv summed in float32 over the query blocks
 *     and rounded once.
 *
 * `gemm` is the address of a bf16 GEMM with nl_gemm_bf16_to's signature (gemm_bf16.h),
 * called on one thread with that thread's `gemm_work` bytes of packing buffers; every sum is
 * in one fixed order, so the results do not depend on the thread count.  work:
 * att_compute_work_bytes(Tk, dk, dv, gemm_work, nwork) bytes on a 64-byte boundary.  Each
 * returns 0, or the most negative status one of its GEMM calls returned. */
#ifndef NEONLITE_ATTENTION_COMPUTE_H
#define NEONLITE_ATTENTION_COMPUTE_H

int64_t att_compute_work_bytes(int64_t Tk, int64_t dk, int64_t dv, int64_t gemm_work,
                               int64_t nwork);
int att_compute_threads(void);
int att_fprop_compute(const uint16_t *q, const uint16_t *k, const uint16_t *v, uint16_t *out,
                       float *lse, int64_t B, int64_t heads, int64_t Tq, int64_t Tk,
                       int64_t dk, int64_t dv, const int64_t *strides, float scale,
                       int causal, const float *mask, int64_t gemm, void *work,
                       int64_t gemm_work, int64_t nwork);
int att_bprop_compute(const uint16_t *q, const uint16_t *k, const uint16_t *v,
                       const uint16_t *out, const float *lse, const uint16_t *dout,
                       uint16_t *dq, uint16_t *dk, uint16_t *dv, int64_t B, int64_t heads,
                       int64_t Tq, int64_t Tk, int64_t dkw, int64_t dvw,
                       const int64_t *strides, float scale, int causal, const float *mask,
                       int64_t gemm, void *work, int64_t gemm_work, int64_t nwork);

#endif
