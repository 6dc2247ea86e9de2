"""The op table's rows of recurrent cells: the per-step gate kernels (dispatched by the table:
``kernels/cpu/recurrent.c``, ``kernels/cuda/recurrent.cu``) and the whole-sequence passes
(the CPU backend's loop over time in C with MKL's packed GEMMs is its choice, in
``cpu/recurrent.py``).  ``table.py`` says what a row holds.

A gate step is one time step of a cell, after the step's recurrent GEMM hg = h_prev @ U.
Rows (N, k) contiguous; ``mask`` (N,) or None: a row whose mask is 0 is padding (keeps its
state, gets no gate gradient, passes dh and dc through).  ``dy`` (N, H) or None is the error
arriving at h_t from the layer's output; ``dh`` (N, H) holds, on entry, the error arriving
from step t+1 and, on exit, the part of dL/dh_{t-1} that does not go through U (the caller
adds dgates @ U^T).  Activations: "tanh", "logistic", "relu", "identity".
``backends/reference/recurrent.py`` is the reference of every one.

Costs per element of the hidden state (N, H): the rnn 2 forward (add, activation) and 3
backward; the LSTM 12 forward (four gate adds and activations, the cell update, tanh, the
output product) and 20 backward; the GRU 14 forward and 22 backward.  A sequence of T steps
adds each step's recurrent GEMM (2 * N * H * G; the backward pass has T - 1 of them)."""
from functools import partial

from ..operand_shapes import check_gate_step
from ..reference import recurrent
from ..shared.recurrent_steps import ACTIVATION_CODES
from .costs import all_tensors, gemm_flops, size
from .table import Kernel, Launch, Op, Operand, Scalar

#: FLOPs per hidden element of one step, (forward, backward)
STEP_FLOPS = {"rnn": (2, 3), "lstm": (12, 20), "gru": (14, 22)}


def _step(cell, forward, names, state):
    """The cost of a step whose parameters are ``names`` and hidden state (N, H) the one
    named ``state`` (given by position or name)."""
    per = STEP_FLOPS[cell][0 if forward else 1]

    def cost(*args, **kwargs):
        bound = dict(zip(names, args), **kwargs)
        return float(per * size(bound[state])), all_tensors(*args, **kwargs)
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
_S, _CU = "recurrent_sequences:", "recurrent:nl_"
_ROWS, _GATES, _BIAS, _MASK = ("M", "D"), ("M", "G"), ("G",), ("M",)
_ACT = Scalar("activation", "int", default="tanh", sample="tanh", codes=ACTIVATION_CODES)
_GATE_ACT = Scalar("gate_activation", "int", default="logistic", sample="logistic",
                   codes=ACTIVATION_CODES)


def _in(name, shape=_ROWS, **flags):
    return Operand(name, shape, **flags)


def _out(name, shape=_ROWS, **flags):
    return Operand(name, shape, written=True, **flags)


def _mask():
    return Operand("mask", _MASK, optional=True, mask=True)


def _dy():
    return Operand("dy", _ROWS, optional=True)


def _step_row(name, doc, cell, state, operands, scalars, backward=None, gradients=()):
    """A gate step's row: C function ``name`` of ``recurrent.c``, CUDA kernel
    ``nl_<cell>_<fprop|bprop>`` over the state's (N, H) elements; N, H from operand
    ``state``."""
    forward = "fprop" in name
    G = {"rnn": 1, "lstm": 4, "gru": 3}[cell]
    cost = _step(cell, forward, [o.name for o in operands], state)
    return Op(name, F, doc, cost, operands=operands,
              scalars=scalars, check=partial(check_gate_step, cell, state),
              reference=getattr(recurrent, name),
              kernel=Kernel("recurrent", name, "recurrent",
                            (Launch(f"nl_{cell}_{'fprop' if forward else 'bprop'}"),),
                            sizes_of=state),
              sample={"M": 4, "D": 3, "G": 3 * G}, backward=backward,
              loss_of="h" if forward else "y", gradients=gradients)


#: the operands of the sequence rows, as ``name`` (read), ``name=`` (written), ``name+``
#: (updated: entry 0 of a state is the initial one, an error accumulates) and ``name?``
#: (optional); ``hg`` is the rows' work array
SEQUENCE_OPERANDS = {
    "rnn_fprop_sequence": "xg hg= U h+ mask?",
    "rnn_bprop_sequence": "h U dy? dh+ dpre= mask?",
    "lstm_fprop_sequence": "gates+ hg= U c+ h+ mask?",
    "lstm_bprop_sequence": "gates U c dy? dh+ dc+ dgates= mask?",
    "gru_fprop_sequence": "gates+ hg= U bias_h hn= h+ mask?",
    "gru_bprop_sequence": "gates U hn h dy? dh+ dgx= dgh= mask?",
}


def _sequence_operands(spec):
    return tuple(Operand(word.rstrip("=+?"), written=word[-1] in "=+", updated=word[-1] == "+",
                         optional=word[-1] == "?") for word in spec.split())


ROWS = (
    _step_row("rnn_fprop_step", "h (N, H) = act(xg + hg); xg the input projection with its "
              "bias.", "rnn", "h",
              (_in("xg"), _in("hg"), _in("h_prev"), _out("h"), _mask()), (_ACT,),
              "rnn_bprop_step", (("dpre", "xg"), ("dpre", "hg"), ("dh", "h_prev"))),
    _step_row("rnn_bprop_step", "dpre (N, H) = (dh + dy) * act'(h) (from the output h).",
              "rnn", "h",
              (_in("h"), _dy(), _out("dh", updated=True), _out("dpre"), _mask()), (_ACT,)),
    _step_row("lstm_fprop_step", "gates (N, 4H), order (i, f, g, o): in, the input "
              "projection with its bias; out, the activated gates.  c = f c_prev + i g and "
              "h = o act(c), (N, H).", "lstm", "h",
              (_out("gates", _GATES, updated=True), _in("hg", _GATES), _in("c_prev"),
               _out("c"), _in("h_prev"), _out("h"), _mask()), (_ACT, _GATE_ACT),
              "lstm_bprop_step", (("dgates", "gates"), ("dgates", "hg"), ("dc", "c_prev"),
                                  ("dh", "h_prev"))),
    _step_row("lstm_bprop_step", "dgates (N, 4H) = dL/d(gate pre-activations); dc (N, H): in "
              "dL/dc_t, out dL/dc_{t-1}.", "lstm", "c",
              (_in("gates", _GATES), _in("c_prev"), _in("c"), _dy(),
               _out("dh", updated=True), _out("dc", updated=True), _out("dgates", _GATES),
               _mask()), (_ACT, _GATE_ACT)),
    _step_row("gru_fprop_step", "PyTorch's GRU: gates (N, 3H) order (r, z, n), in the input "
              "projection with its bias, out the activated gates; bias_h (3H,) the recurrent "
              "bias; hn (N, H) <- hg_n + bias_h_n.  n = tanh(x_n + r hn), h = (1 - z) n + "
              "z h_prev.", "gru", "h",
              (_out("gates", _GATES, updated=True), _in("hg", _GATES), _in("bias_h", _BIAS),
               _out("hn"), _in("h_prev"), _out("h"), _mask()), (),
              "gru_bprop_step", (("dgx", "gates"), ("dgh", "hg"), ("dh", "h_prev"))),
    _step_row("gru_bprop_step", "dgx, dgh (N, 3H): dL/d(input projection) and dL/d(h_prev @ U "
              "+ bias_h).", "gru", "h_prev",
              (_in("gates", _GATES), _in("hn"), _in("h_prev"), _dy(), _out("dh", updated=True),
               _out("dgx", _GATES), _out("dgh", _GATES), _mask()), ()),
) + tuple(
    Op(name, F, doc, cost, operands=_sequence_operands(SEQUENCE_OPERANDS[name]),
       reference=getattr(recurrent, name), c_symbols=(c,), cuda_functions=cuda,
       backward=backward)
    for name, doc, cost, c, cuda, backward in (
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
