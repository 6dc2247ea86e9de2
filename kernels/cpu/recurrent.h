/* One time step of the recurrent cells (the gate kernels): rows (N, k) contiguous, the
 * equations and argument meanings of backends/numpy_recurrent.py, which is their reference.
 * act and gate_act: 0 tanh, 1 logistic, 2 relu, 3 identity.  mask (N,) or NULL: a row whose
 * mask is 0 is padding (keeps its state, no gate gradient, passes dh/dc through).  dy (N, H)
 * may be NULL.  Every kernel allocates nothing. */

/* h = act(xg + hg) */
void rnn_fprop_step(const real *xg, const real *hg, const real *h_prev, real *h,
                    const real *mask, int64_t N, int64_t H, int act);
/* dpre = (dh + dy) act'(h); dh <- 0 (padded rows: dh + dy) */
void rnn_bprop_step(const real *h, const real *dy, real *dh, real *dpre, const real *mask,
                    int64_t N, int64_t H, int act);

/* gates (N, 4H), order i, f, g, o: in the input projection, out the activated gates;
 * c = f c_prev + i g, h = o act(c) */
void lstm_fprop_step(real *gates, const real *hg, const real *c_prev, real *c,
                     const real *h_prev, real *h, const real *mask, int64_t N, int64_t H,
                     int act, int gate_act);
/* dgates (N, 4H) pre-activation gradients; dc in dL/dc_t, out dL/dc_{t-1}; dh as above */
void lstm_bprop_step(const real *gates, const real *c_prev, const real *c, const real *dy,
                     real *dh, real *dc, real *dgates, const real *mask, int64_t N, int64_t H,
                     int act, int gate_act);

/* PyTorch's GRU: gates (N, 3H) order r, z, n (in the input projection, out activated);
 * hg = h_prev U (N, 3H), bias_h (3H,); hn (N, H) <- hg_n + bias_h_n */
void gru_fprop_step(real *gates, const real *hg, const real *bias_h, real *hn,
                    const real *h_prev, real *h, const real *mask, int64_t N, int64_t H);
/* dgx, dgh (N, 3H): gradients of the input projection and of h_prev U + bias_h;
 * dh <- (dh + dy) z (padded rows: dh + dy) */
void gru_bprop_step(const real *gates, const real *hn, const real *h_prev, const real *dy,
                    real *dh, real *dgx, real *dgh, const real *mask, int64_t N, int64_t H);

/* The units per chunk of the whole-sequence passes (each chunk is one thread's). */
int64_t lstm_sequence_chunk(void);
/* The LSTM's whole sequence of T steps (t = 0..T-1, or T-1..0 with reverse), each step the
 * recurrent GEMM and the gate pass of lstm_fprop_step, on `threads` OpenMP threads (0: all).
 * `pack` and `compute` are the addresses of MKL's cblas_?gemm_pack and cblas_?gemm_compute
 * (row-major; they run on the calling thread inside an OpenMP region).  gates (T, N, 4H): in
 * the input projections with bias, out the activated gates; hg (N, 4H) work; U (H, 4H);
 * packed: 4 * chunks * stride work elements, stride at least the packed size of an
 * (N, H) @ (H, lstm_sequence_chunk()) B matrix; c, h (T+1, N, H): entry 0 (T with reverse)
 * holds the initial state, entry t+1 (t) the state after step t; mask (T, N) or NULL. */
void lstm_fprop_sequence(real *gates, real *hg, const real *U, real *packed, int64_t stride,
                         real *c, real *h, const real *mask, int64_t T, int64_t N, int64_t H,
                         int reverse, int act, int gate_act, int64_t pack, int64_t compute,
                         int threads);
/* Its backward pass, steps in the opposite order, each lstm_bprop_step then (but after the
 * last) dh += dgates_t U^T.  packed: chunks * stride work elements, stride at least the packed
 * size of an (N, 4H) @ (4H, lstm_sequence_chunk()) B matrix; dy (T, N, H) or NULL; dh, dc
 * (N, H) in the gradients reaching the final state, out those of the initial state except
 * for the last GEMM (as lstm_bprop_step leaves them); dgates (T, N, 4H) out. */
void lstm_bprop_sequence(const real *gates, const real *U, real *packed, int64_t stride,
                         const real *c, const real *dy, real *dh, real *dc, real *dgates,
                         const real *mask, int64_t T, int64_t N, int64_t H, int reverse,
                         int act, int gate_act, int64_t pack, int64_t compute, int threads);
