/* Fused (flash-style) attention on slices: q (B, Tq, dk), k (B, Tk, dk), v (B, Tk, dv),
 * out (B, Tq, dv), lse (B, Tq, contiguous); B = N * H slices, slice b = (example b / H, head
 * b % H).  Each of q, k, v, out (and dout, dq, dk, dv) comes with three strides in elements,
 * (example, head, row): element (b, i, d) is at x[(b / H) * s0 + (b % H) * s1 + i * s2 + d].
 * Head-major (B, T, d) arrays have s0 = H * s1; token-major (N, T, H, d) views (the columns
 * of a projection) have s1 = d, s2 = the row width.
 *
 * Query block r (rows r*bq ..) of slice b visits the key blocks (keys c*bk ..) listed in
 * cols[row_ptr[t*nqb + r] .. row_ptr[t*nqb + r + 1]) in increasing order, t = (b % H) when the
 * table has H heads (table_heads == H) and 0 when it has one; the transposed lists
 * (col_ptr/rows over t*nkb + c) give the query blocks that visit key block c.  Keys of blocks
 * not listed are hidden; so are keys j > i + (Tk - Tq) with `causal`, and keys whose
 * key_mask (N, Tk; NULL: none) entry is 0.  bq, bk <= FA_MAX_BLOCK; dk, dv <= FA_MAX_WIDTH.
 *
 * Dropout (keep < 1): probability (b, i, j) is kept, scaled by 1/keep, when the Philox4x32-10
 * uniform of element e = (b % H)*Tq*Tk + i*Tk + j of global example first + b / H is below
 * (float)keep: counter (g lo, g hi, step, stream) with g = example * ceil(H*Tq*Tk / 4) + e / 4,
 * word e % 4, key = seed (backends/philox.py: example_masks).  keep >= 1: no dropout. */

#define FA_MAX_BLOCK 64
#define FA_MAX_WIDTH 256

/* The work array of a call: fa_work_size(dk, dv) reals for each of fa_threads() threads (the
 * OpenMP threads a parallel region started now would use), whatever Tq and Tk are. */
int64_t fa_threads(void);
int64_t fa_work_size(int64_t dk, int64_t dv);

/* The `packed` array of either call: fa_pack_size(Tq, Tk, dk, dv) reals for each of
 * fa_threads() threads, or NULL. */
int64_t fa_pack_size(int64_t Tq, int64_t Tk, int64_t dk, int64_t dv);

/* out and lse (log of each row's softmax sum, -inf where every key is hidden: out is 0 there).
 * strides: 12 (q, k, v, out).  packed (or NULL: k and v read in place): when k or v has
 * strided rows, Tq > bq and Tk > 256, a thread copies a slice's k and v rows there,
 * contiguous, when it starts on that slice, and reads the copy. */
void fa_fprop(const real *q, const real *k, const real *v, real *out, real *lse, int64_t B,
              int64_t H, int64_t Tq, int64_t Tk, int64_t dk, int64_t dv,
              const int64_t *strides, double scale, int causal, const real *key_mask,
              int64_t bq, int64_t bk, const int32_t *row_ptr, const int32_t *cols,
              int64_t table_heads, double keep, uint64_t seed, uint32_t step, uint32_t stream,
              uint64_t first, real *work, real *packed);

/* dq, dk, dv (overwritten) for the output gradient dout (B, Tq, dv), given q, k, v, out and
 * lse of fa_fprop with the same arguments; strides: 24 (q, k, v, out, dout, dq, dk, dv).
 * The key blocks of a slice are dealt to `groups` groups: group g of table head t has the
 * blocks group_cols[group_ptr[t*groups + g] .. group_ptr[t*groups + g + 1]) (each block in
 * one group).  One work item per (slice, group) sums dK and dV of its key blocks and a
 * partial dQ (group 0 into dq, group g > 0 into dq_parts, (groups-1) x B x Tq x dk reals),
 * each over its blocks in the listed order; then dq += the partials in group order.  So the
 * result does not depend on the thread count.  drows: B x Tq reals of work (each query row's
 * rowsum(dout * out)).  packed (or NULL: q and dout read in place): when q or dout has strided
 * rows, Tk > bk and Tq > 256, a thread copies a slice's q and dout rows there, contiguous, when
 * it starts on that slice, and reads the copy. */
void fa_bprop(const real *q, const real *k, const real *v, const real *out, const real *lse,
              const real *dout, real *dq, real *dkey, real *dval, int64_t B, int64_t H,
              int64_t Tq, int64_t Tk, int64_t dk, int64_t dv, const int64_t *strides,
              double scale, int causal, const real *key_mask, int64_t bq, int64_t bk,
              const int32_t *col_ptr, const int32_t *rows, int64_t table_heads, double keep,
              uint64_t seed, uint32_t step, uint32_t stream, uint64_t first, int64_t groups,
              const int32_t *group_ptr, const int32_t *group_cols, real *dq_parts, real *drows,
              real *work, real *packed);

/* fa_fprop and fa_bprop on bfloat16 operands: q, k, v, out, dout, dq, dk, dv are bf16 bit
 * patterns (uint16, the same strides in elements); lse, key_mask, dq_parts, drows, work and
 * packed stay `real` (the float32 variant's), and the arithmetic is `real`'s.  Each block of
 * rows is widened as a tile first reads it and each written block rounded to nearest even
 * once complete (flash_attention_bf16.h), every sum as in fa_fprop / fa_bprop: the results
 * are those of widening the operands, running fa_fprop / fa_bprop and rounding the written
 * ones.  work: fa_work_size_bf16(dk, dv) reals a thread; packed (never NULL):
 * fa_pack_size_bf16(Tq, Tk, dk, dv) reals a thread; dq_parts: `groups` x B x Tq x dk reals
 * when groups > 1 (each group's dQ, rounded into dq once summed), else NULL. */
int64_t fa_work_size_bf16(int64_t dk, int64_t dv);
int64_t fa_pack_size_bf16(int64_t Tq, int64_t Tk, int64_t dk, int64_t dv);
void fa_fprop_bf16(const uint16_t *q, const uint16_t *k, const uint16_t *v, uint16_t *out,
                   real *lse, int64_t B, int64_t H, int64_t Tq, int64_t Tk, int64_t dk,
                   int64_t dv, const int64_t *strides, double scale, int causal,
                   const real *key_mask, int64_t bq, int64_t bk, const int32_t *row_ptr,
                   const int32_t *cols, int64_t table_heads, double keep, uint64_t seed,
                   uint32_t step, uint32_t stream, uint64_t first, real *work, real *packed);
void fa_bprop_bf16(const uint16_t *q, const uint16_t *k, const uint16_t *v,
                   const uint16_t *out, const real *lse, const uint16_t *dout, uint16_t *dq,
                   uint16_t *dkey, uint16_t *dval, int64_t B, int64_t H, int64_t Tq, int64_t Tk,
                   int64_t dk, int64_t dv, const int64_t *strides, double scale, int causal,
                   const real *key_mask, int64_t bq, int64_t bk, const int32_t *col_ptr,
                   const int32_t *rows, int64_t table_heads, double keep, uint64_t seed,
                   uint32_t step, uint32_t stream, uint64_t first, int64_t groups,
                   const int32_t *group_ptr, const int32_t *group_cols, real *dq_parts,
                   real *drows, real *work, real *packed);
