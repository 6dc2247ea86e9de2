"""The op table's rows of recurrent cells: the per-step gate kernels and the whole-sequence
passes (``table.py`` says what a row holds).  Costs per element of the hidden state (N, H):
the rnn 2 forward (add, activation) and 3 backward; the LSTM 12 forward (four gate adds and
activations, the cell update, tanh, the output product) and 20 backward; the GRU 14 forward
and 22 backward.  A sequence of T steps adds each step's recurrent GEMM (2 * N * H * G; the
backward pass has T - 1 of them)."""
from ..reference import recurrent
from .costs import all_tensors, gemm_flops, size
from .table import Op

#: FLOPs per hidden element of one step, (forward, backward)
STEP_FLOPS = {"rnn": (2, 3), "lstm": (12, 20), "gru": (14, 22)}


def _step(cell, forward, state):
    """The cost of a step whose hidden state (N, H) is argument ``state``."""
    per = STEP_FLOPS[cell][0 if forward else 1]

    def cost(*args, **kwargs):
        return float(per * size(args[state])), all_tensors(*args, **kwargs)
    return cost


def _sequence(cell, forward, params, gates):
    """A sequence's cost: ``params`` the method's leading parameters, ``gates`` the one
    holding the gates (T, N, G) (the rnn's xg or dpre); ``U`` (H, G) the recurrent weights."""
    per = STEP_FLOPS[cell][0 if forward else 1]

    def cost(*args, **kwargs):
        bound = dict(zip(params, args), **kwargs)
        T, N, G = bound[gates].shape
        H = bound["U"].shape[0]
        gemms = T if forward else T - 1
        return (gemm_flops(N, G, H, gemms) + float(per * T * N * H),
                all_tensors(*args, **kwargs))
    return cost


_RNN_F = _sequence("rnn", True, ("xg", "hg", "U"), "xg")
_RNN_B = _sequence("rnn", False, ("h", "U", "dy", "dh", "dpre"), "dpre")
_LSTM_F = _sequence("lstm", True, ("gates", "hg", "U"), "gates")
_LSTM_B = _sequence("lstm", False, ("gates", "U"), "gates")
_GRU_F = _sequence("gru", True, ("gates", "hg", "U"), "gates")
_GRU_B = _sequence("gru", False, ("gates", "U"), "gates")
F = "recurrent"
_C, _S, _CU = "recurrent:", "recurrent_sequences:", "recurrent:nl_"
ROWS = tuple(
    Op(name, F, doc, cost, reference=getattr(recurrent, name),
       c_symbols=(c,), cuda_functions=cuda, backward=backward)
    for name, doc, cost, c, cuda, backward in (
        ("rnn_fprop_step", "h = act(xg + hg)", _step("rnn", True, 3), _C + "rnn_fprop_step",
         (_CU + "rnn_fprop",), "rnn_bprop_step"),
        ("rnn_bprop_step", "dpre = (dh + dy) * act'(h)", _step("rnn", False, 2),
         _C + "rnn_bprop_step", (_CU + "rnn_bprop",), None),
        ("lstm_fprop_step", "one LSTM step after h_prev @ U", _step("lstm", True, 5),
         _C + "lstm_fprop_step", (_CU + "lstm_fprop",), "lstm_bprop_step"),
        ("lstm_bprop_step", "dgates and dc of one LSTM step", _step("lstm", False, 4),
         _C + "lstm_bprop_step", (_CU + "lstm_bprop",), None),
        ("gru_fprop_step", "one GRU step after h_prev @ U", _step("gru", True, 5),
         _C + "gru_fprop_step", (_CU + "gru_fprop",), "gru_bprop_step"),
        ("gru_bprop_step", "dgx, dgh of one GRU step", _step("gru", False, 3),
         _C + "gru_bprop_step", (_CU + "gru_bprop",), None),
        ("rnn_fprop_sequence", "T rnn steps", _RNN_F,
         _S + "rnn_fprop_sequence", (_CU + "rnn_fprop",), "rnn_bprop_sequence"),
        ("rnn_bprop_sequence", "the rnn steps backwards", _RNN_B,
         _S + "rnn_bprop_sequence", (_CU + "rnn_bprop",), None),
        ("lstm_fprop_sequence", "T LSTM steps", _LSTM_F,
         _S + "lstm_fprop_sequence", (_CU + "lstm_fprop",), "lstm_bprop_sequence"),
        ("lstm_bprop_sequence", "the LSTM steps backwards", _LSTM_B,
         _S + "lstm_bprop_sequence", (_CU + "lstm_bprop",), None),
        ("gru_fprop_sequence", "T GRU steps", _GRU_F,
         _S + "gru_fprop_sequence", (_CU + "gru_fprop",), "gru_bprop_sequence"),
        ("gru_bprop_sequence", "the GRU steps backwards", _GRU_B,
         _S + "gru_bprop_sequence", (_CU + "gru_bprop",), None),
    ))
