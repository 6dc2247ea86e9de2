/* A small virtual machine that evaluates an elementwise op-tree in one pass over memory.
 *
 * The host compiles a tree into a program of instructions (op, dst, a, b) over registers:
 * registers 0 .. nleaf-1 are the tree's tensors (leaves), the next nconst are its scalars,
 * and each instruction writes a register of its own (dst).  The machine runs the program over a
 * rows x cols grid, a block of up to NL_VM_BLOCK columns at a time, so every intermediate stays
 * in L1 and every tensor is read once.  Leaf l's element (i, j) lies at
 *     leaf_addr[l] + i * leaf_strides[2*l] + j * leaf_strides[2*l + 1]   (in elements),
 * so a stride of 0 broadcasts; the result (the last instruction's register) is stored at
 *     out_addr + i * out_rs + j * out_cs.
 * Unary ops ignore b.  Comparisons give 1 or 0.
 *
 * optree_run_multi evaluates several trees in the same pass: output o (of nout, all on the
 * same grid) is register out_reg[o], stored at out_addr[o] + i * out_strides[2*o] +
 * j * out_strides[2*o + 1], in order o = 0, 1, ... for each block.  A later tree reads an
 * earlier tree's result from its register, so the outputs are those of evaluating the trees
 * one after another, element by element (an output may be a leaf exactly, never overlap one
 * otherwise).
 */
#define NL_OP_NEG 0
#define NL_OP_ABS 1
#define NL_OP_SQR 2
#define NL_OP_SQRT 3
#define NL_OP_RSQRT 4
#define NL_OP_EXP 5
#define NL_OP_LOG 6
#define NL_OP_TANH 7
#define NL_OP_SIG 8
#define NL_OP_SIGN 9
#define NL_OP_ERF 10
#define NL_OP_ADD 11
#define NL_OP_SUB 12
#define NL_OP_MUL 13
#define NL_OP_DIV 14
#define NL_OP_POW 15
#define NL_OP_MAXIMUM 16
#define NL_OP_MINIMUM 17
#define NL_OP_EQ 18
#define NL_OP_NE 19
#define NL_OP_LT 20
#define NL_OP_LE 21
#define NL_OP_GT 22
#define NL_OP_GE 23
#define NL_VM_MAX_REGS 64
#define NL_VM_BLOCK 256

/* Both return 0, or -1 when the program is empty (optree_run) or needs more than
 * NL_VM_MAX_REGS registers.  `scratch` is the caller's: optree_scratch_size(nregs) `real`s
 * with nregs = nleaf + nconst + ninstr, one NL_VM_BLOCK-element block per register for each
 * OpenMP thread the call may start (omp_get_max_threads() of the calling thread), that is
 * threads * nregs * 256 * sizeof(real) bytes; its contents on entry do not matter and the
 * machine allocates nothing. */
int optree_run(const int32_t *code, int64_t ninstr, const int64_t *leaf_addr,
               const int64_t *leaf_strides, int64_t nleaf, const double *consts, int64_t nconst,
               int64_t out_addr, int64_t out_rs, int64_t out_cs, int64_t rows, int64_t cols,
               real *scratch);
int optree_run_multi(const int32_t *code, int64_t ninstr, const int64_t *leaf_addr,
                     const int64_t *leaf_strides, int64_t nleaf, const double *consts,
                     int64_t nconst, const int32_t *out_reg, const int64_t *out_addr,
                     const int64_t *out_strides, int64_t nout, int64_t rows, int64_t cols,
                     real *scratch);
int64_t optree_scratch_size(int64_t nregs);

/* optree_run_multi with bfloat16 operands (used with real = float): leaf l holds uint16
 * bfloat16 bit patterns where leaf_bf16[l] is nonzero (widened exactly as they are read),
 * output o where out_bf16[o] is (each value rounded to nearest even as it is stored, and the
 * register then holds the rounded value, so a later tree reads the output's new value); a
 * NULL array: none.  A bf16 output's register must be an instruction's (-1 otherwise); the
 * strides are in elements of each operand's own type. */
int optree_run_typed(const int32_t *code, int64_t ninstr, const int64_t *leaf_addr,
                     const int64_t *leaf_strides, const int8_t *leaf_bf16, int64_t nleaf,
                     const double *consts, int64_t nconst, const int32_t *out_reg,
                     const int64_t *out_addr, const int64_t *out_strides,
                     const int8_t *out_bf16, int64_t nout, int64_t rows, int64_t cols,
                     real *scratch);

/* out (C,) = the column sums of a (M, C), rows summed in fixed blocks (nl_blocks) in double,
 * so the result does not depend on the threads.  The host runs a tree's `sum` over leading
 * axes of a contiguous tensor with it.
 *
 * work: the caller's scratch, optree_column_sum_work_size(M, C) doubles, i.e. with
 * B = min(max(M, 1), 32) row blocks: B * C doubles (each block's partial sums) followed by
 * B * C `real`s (each block's sums of runs of 32 rows), B * C * (8 + sizeof(real)) bytes
 * rounded up to a multiple of 8 (nl_block_sums_size in common.h).  Its contents on entry do
 * not matter; the function allocates nothing. */
void optree_column_sum(const real *a, real *out, double *work, int64_t M, int64_t C);

/* The length of optree_column_sum's `work` for (M, C), in doubles (see above). */
int64_t optree_column_sum_work_size(int64_t M, int64_t C);

