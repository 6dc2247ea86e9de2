/* One time step of the recurrent cells (the gate kernels): rows (N, k) contiguous, the
 * equations and argument meanings of backends/reference/recurrent.py, which is their reference.
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
