/* The bf16 storage path's GEMM on MKL's packed GEMM (gemm_packed.c): float32 arithmetic on
 * bfloat16 operands where the float32 GEMM is MKL's, no pass over memory of its own to widen
 * an operand or narrow the result.
 *
 *   C = alpha * op(A) @ op(B) + beta * C
 *
 * op(A) is M x K: A[m * lda + k], or with transA A[k * lda + m];
 * op(B) is K x N: B[k * ldb + n], or with transB B[n * ldb + k]; both hold bfloat16 bits.
 *
 * One operand is packed (pack_b: op(B), else op(A)), cut into chunks of `chunk` columns of
 * op(B) (rows of op(A)) and the inner dimension into `kparts` parts (nl_gemm_packed_part
 * long, the last what is left; fewer where K is too short for them), each piece widened and
 * packed by MKL's cblas_sgemm_pack (alpha applied there) into the floats from
 * `packed` + (j * kparts + part) * packed_stride (chunk j): the threads share out the pieces,
 * so a product of one chunk packs it on as many threads as it has parts.  Each tile sums the
 * parts in order (MKL's sum over the first part, scaled by beta's C, then the next added).
 * The other operand is cut into strips of `strip` rows of op(A) (columns of op(B)); a thread
 * widens a strip into its work area while it is about to use it, multiplies it by every
 * packed chunk with cblas_sgemm_compute into a tile of C (float32 C: in place; bfloat16 Cb:
 * a float32 tile in the work area, widened first where beta != 0, rounded to nearest even
 * into Cb while still in cache).
 *
 * Exactly one of C (float32, row stride ldc) and Cb (bfloat16 bits, row stride ldc) is
 * given.  `work` holds `threads` areas of work_stride floats (nl_gemm_packed_work).  The
 * tiles and their calls are the same for every thread count, so the result is too.  MKL must
 * run single-threaded on each calling thread (MKL_Set_Num_Threads_Local(1) around the call).
 * pack and compute are the addresses of cblas_sgemm_pack and cblas_sgemm_compute.
 *
 * Returns 0; -1 when C and Cb are both NULL or both given. */
int nl_gemm_packed(const uint16_t *A, const uint16_t *B, float *C, uint16_t *Cb, int64_t M,
                   int64_t N, int64_t K, int64_t lda, int64_t ldb, int64_t ldc, int transA,
                   int transB, float alpha, float beta, int pack_b, float *packed,
                   int64_t packed_stride, float *work, int64_t work_stride, int64_t strip,
                   int64_t chunk, int64_t kparts, int64_t pack, int64_t compute, int threads);

/* One product's arguments for nl_gemm_packed_run: nl_gemm_packed's but the scales, the two
 * areas and the thread count (a caller that runs the same product every step fills it once).
 * set_threads is the address of MKL_Set_Num_Threads_Local, or 0: MKL then already runs
 * single-threaded on the calling thread. */
typedef struct {
    const uint16_t *A, *B;
    float *C;
    uint16_t *Cb;
    int64_t M, N, K, lda, ldb, ldc;
    int transA, transB, pack_b;
    int64_t packed_stride, work_stride, strip, chunk, kparts, pack, compute, set_threads;
} nl_packed_product;

/* nl_gemm_packed of product p with these scales, areas and threads, MKL set to one thread on
 * the calling thread around it (set_threads) and its setting restored after. */
int nl_gemm_packed_run(const nl_packed_product *p, float alpha, float beta, float *packed,
                       float *work, int threads);

/* the rows of op(A) (pack_b) or columns of op(B) of a strip, for inner dimension K and
 * `length` rows of op(A) (columns of op(B)) in all: about a quarter of them, at least 64, at
 * most what keeps a widened strip within 1 MiB (and 256) */
int64_t nl_gemm_packed_strip(int64_t K, int64_t length);

/* the length of each part but the last of an inner dimension K cut into kparts parts (K for
 * one part): ceil(K / kparts) rounded up to a multiple of 16 */
int64_t nl_gemm_packed_part(int64_t K, int64_t kparts);

/* the floats one thread's work area needs for inner dimension K and strips of `strip` */
int64_t nl_gemm_packed_work(int64_t K, int64_t strip, int64_t chunk);
