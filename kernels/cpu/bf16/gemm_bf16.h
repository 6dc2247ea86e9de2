/* bfloat16 x bfloat16 -> float32-accumulate GEMM (see gemm_bf16.c).
 *
 * C (M x N float32, row stride ldc) = alpha * op(A) @ op(B) + beta * C, where A and B hold
 * bfloat16 bit patterns (uint16) and
 *   op(A) is M x K: A[m * lda + k], or with transA A[k * lda + m];
 *   op(B) is K x N: B[k * ldb + n], or with transB B[n * ldb + k].
 * The three products of training: forward Y = X W (no transposes), input gradient
 * dX = dY W^T (transB), weight gradient dW = X^T dY (transA).  beta == 0 never reads C.
 * `threads` OpenMP threads (<= 0: OpenMP's default); the result does not depend on it (the
 * K sum of each output element is never split across threads).
 * Returns 0, or -1 where this build holds no such kernel (nl_gemm_bf16_built() == 0). */
int nl_gemm_bf16(const uint16_t *A, const uint16_t *B, float *C, int64_t M, int64_t N,
                 int64_t K, int64_t lda, int64_t ldb, int64_t ldc, int transA, int transB,
                 float alpha, float beta, int threads);

/* nl_gemm_bf16, and with Cb (not NULL) the bf16 output too: Cb (M x N uint16 bfloat16 bits,
 * row stride ldcb) = C rounded to nearest even, each block written by the GEMM's epilogue
 * right after its last k block (no separate pass over C); C still holds the float32 result
 * (its accumulator).  `work`: the threads' packing buffers, nl_gemm_bf16_work_bytes(M, N,
 * threads) bytes on a 64-byte boundary (-4 where it is not: the panels are read with
 * aligned loads), used during the call only (a caller keeps one for every call); NULL: the
 * call allocates them and frees them before it returns (-2 where it cannot). */
int nl_gemm_bf16_to(const uint16_t *A, const uint16_t *B, float *C, uint16_t *Cb, int64_t M,
                    int64_t N, int64_t K, int64_t lda, int64_t ldb, int64_t ldc, int64_t ldcb,
                    int transA, int transB, float alpha, float beta, int threads, void *work);

/* the bytes of the `work` nl_gemm_bf16_to takes for an M x N result on `threads` threads
 * (<= 0: OpenMP's default), whatever K */
int64_t nl_gemm_bf16_work_bytes(int64_t M, int64_t N, int threads);

/* 1 when the kernel was compiled with the instructions of this variant (VDPBF16PS, or AMX
 * TDPBF16PS in the AMX variant), else 0: the caller must not call it then. */
int nl_gemm_bf16_built(void);

/* bf16 FLOP per second of `threads` threads, each running `iters` rounds of 16 independent
 * bf16 dot-product chains (VDPBF16PS: 64 FLOP each; AMX: one 16x16x32 TDPBF16PS, 16384
 * FLOP); `best` (one slot per thread) keeps each thread's best rate over calls; returns the
 * sum of the best rates (0 where not built). */
double nl_bf16_peak_run(long iters, int threads, double *best);
