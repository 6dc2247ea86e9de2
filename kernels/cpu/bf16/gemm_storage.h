/* The GEMM of the bf16 storage path (gemm_storage.c): float32 arithmetic on operands stored as
 * bfloat16 or float32, widened while they are packed, and a bfloat16 output rounded in the
 * epilogue, so no separate pass widens an operand or narrows the result.
 *
 *   C = alpha * op(A) @ op(B) + beta * C
 *
 * op(A) is M x K: A[m * lda + k], or with transA A[k * lda + m];
 * op(B) is K x N: B[k * ldb + n], or with transB B[n * ldb + k];
 * A holds bfloat16 bit patterns (uint16) where a_bf16 is 1, else float32; B likewise.
 *
 * The result goes to C (M x N float32, row stride ldc), to Cb (M x N bfloat16 bits, row stride
 * ldcb, rounded to nearest even as bf16_bits.h rounds), or to both; beta != 0 reads the old
 * result from C where given, else from Cb.  C may be NULL only when K <= nl_gemm_storage_kc()
 * (one block of k: the sum never leaves the registers); past that C is the float32
 * accumulator the k blocks add into, and Cb receives each block of C after its last k block.
 * `threads` OpenMP threads (<= 0: OpenMP's default); the result does not depend on it (the K
 * sum of each output element is never split across threads and runs in one fixed order).
 * `work`: the threads' packing buffers, nl_gemm_storage_work_bytes(M, N, threads) bytes on a
 * 64-byte boundary, used during the call only (a caller keeps one for every call); NULL: the
 * call allocates them and frees them before it returns.
 *
 * Returns 0; -1 where this build holds no kernel (nl_gemm_storage_built() == 0); -2 when
 * `work` is NULL and the packing buffers cannot be allocated; -3 when C is NULL and Cb is NULL
 * or K is past one block; -4 when `work` is not on a 64-byte boundary. */
int nl_gemm_storage(const void *A, int a_bf16, const void *B, int b_bf16, float *C,
                    uint16_t *Cb, int64_t M, int64_t N, int64_t K, int64_t lda, int64_t ldb,
                    int64_t ldc, int64_t ldcb, int transA, int transB, float alpha, float beta,
                    int threads, void *work);

/* the bytes of the `work` that nl_gemm_storage takes for an M x N result on `threads` threads
 * (<= 0: OpenMP's default), whatever K */
int64_t nl_gemm_storage_work_bytes(int64_t M, int64_t N, int threads);

/* the largest K that nl_gemm_storage sums in one block (C may be NULL up to it) */
int64_t nl_gemm_storage_kc(void);

/* 1 when the kernel was compiled with a micro-kernel (AVX-512 F, BW and VL; or AVX2 and FMA),
 * else 0: the caller must not call it then. */
int nl_gemm_storage_built(void);

/* the instruction set of the micro-kernel compiled in: "AVX-512", "AVX2" or "none" */
const char *nl_gemm_storage_isa(void);
