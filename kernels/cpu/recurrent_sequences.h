/* The whole-sequence passes of the recurrent cells: the T steps of a layer (t = 0..T-1, or
 * T-1..0 with reverse), each step's recurrent GEMM and the gate pass of the cell's step kernel
 * (recurrent.h), on `threads` OpenMP threads (0: all).  `pack` and `compute` are the addresses
 * of MKL's cblas_?gemm_pack and cblas_?gemm_compute (row-major; they run on the calling thread
 * inside an OpenMP region).  G is the cell's gate blocks times H: H for the Elman cell (rnn),
 * 3H for the GRU, 4H for the LSTM.
 *
 * Forward: gates (T, N, G) in the input projections with bias (the GRU and LSTM: out the
 * activated gates); hg (N, G) work; U (H, G); packed: chunks * G / H * stride work elements,
 * stride at least the packed size of an (N, H) @ (H, recurrent_sequence_chunk()) B matrix;
 * h (and c) (T+1, N, H): entry 0 (T with reverse) holds the initial state, entry t+1 (t) the
 * state after step t; the GRU's hn (T, N, H) the recurrent n term with its bias; mask (T, N)
 * or NULL.
 *
 * Backward, the steps in the opposite order, each the cell's bprop step then (but after the
 * last) dh += d_t U^T (d_t the rnn's dpre, the LSTM's dgates, the GRU's dgh): packed:
 * chunks * stride work elements, stride at least the packed size of an (N, G) @
 * (G, recurrent_sequence_chunk()) B matrix; dy (T, N, H) or NULL; dh (and dc) (N, H) in the
 * gradients reaching the final state, out those of the initial state except for the last
 * GEMM (as the bprop step leaves them); dpre, dgates, dgx, dgh (T, N, G) out. */

/* The units per chunk of the whole-sequence passes (each chunk is one thread's). */
int64_t recurrent_sequence_chunk(void);

void rnn_fprop_sequence(const real *xg, real *hg, const real *U, real *packed, int64_t stride,
                        real *h, const real *mask, int64_t T, int64_t N, int64_t H,
                        int reverse, int act, int64_t pack, int64_t compute, int threads);
void rnn_bprop_sequence(const real *h, const real *U, real *packed, int64_t stride,
                        const real *dy, real *dh, real *dpre, const real *mask, int64_t T,
                        int64_t N, int64_t H, int reverse, int act, int64_t pack,
                        int64_t compute, int threads);

void lstm_fprop_sequence(real *gates, real *hg, const real *U, real *packed, int64_t stride,
                         real *c, real *h, const real *mask, int64_t T, int64_t N, int64_t H,
                         int reverse, int act, int gate_act, int64_t pack, int64_t compute,
                         int threads);
void lstm_bprop_sequence(const real *gates, const real *U, real *packed, int64_t stride,
                         const real *c, const real *dy, real *dh, real *dc, real *dgates,
                         const real *mask, int64_t T, int64_t N, int64_t H, int reverse,
                         int act, int gate_act, int64_t pack, int64_t compute, int threads);

void gru_fprop_sequence(real *gates, real *hg, const real *U, real *packed, int64_t stride,
                        const real *bias_h, real *hn, real *h, const real *mask, int64_t T,
                        int64_t N, int64_t H, int reverse, int64_t pack, int64_t compute,
                        int threads);
void gru_bprop_sequence(const real *gates, const real *U, real *packed, int64_t stride,
                        const real *hn, const real *h, const real *dy, real *dh, real *dgx,
                        real *dgh, const real *mask, int64_t T, int64_t N, int64_t H,
                        int reverse, int64_t pack, int64_t compute, int threads);
