"""The profiler's FLOP counts (neonlite/profiler/flops.py) against counts worked out by hand:
GEMM, convolution, dense attention (full and causal, where the layer visits only the tiles
on and below the diagonal) and block-sparse attention (stored blocks only)."""
import numpy as np
import pytest

from neonlite import Model
from neonlite.backends.plans import ConvPlan
from neonlite.layers import BlockSparseAttention, MultiHeadAttention
from neonlite.optimizers import GradientDescentMomentum
from neonlite.profiler import op_cost
from neonlite.profiler.flops import visible_pairs
from neonlite.profiler.instrument import Instrumentation
from neonlite.profiler.recorder import Recorder

from support.harness import make_backend


class _Shape:
    def __init__(self, shape):
        self.shape, self.target_shape, self.name = shape, None, "shape"


def test_gemm_counts_two_flops_per_multiply_add():
    be = make_backend(batch_size=2)
    A, B, C = be.zeros((6, 5)), be.zeros((5, 7)), be.zeros((6, 7))
    assert op_cost("compound_dot", (A, B, C), {})[0] == 2 * 6 * 7 * 5
    At = be.zeros((5, 6))
    assert op_cost("compound_dot", (At, B, C), {"transA": True})[0] == 2 * 6 * 7 * 5
    flops, nbytes = op_cost("compound_dot", (A, B, C), {"beta": 1.0})
    assert nbytes == 4 * (30 + 35 + 42 + 42)  # C read too when beta != 0
    a, b, c = be.zeros((3, 4, 5)), be.zeros((3, 5, 2)), be.zeros((3, 4, 2))
    assert op_cost("batched_dot", (a, b, c), {})[0] == 3 * 2 * 4 * 2 * 5


@pytest.mark.parametrize("geometry,expected", [
    # N, C, H, W, K, R, S, pad, stride -> 2 * N * P * Q * K * R * S * C by hand
    ((2, 3, 8, 8, 4, 3, 3, 1, 1), 2 * 2 * 8 * 8 * 4 * 3 * 3 * 3),    # P = Q = 8
    ((1, 16, 9, 9, 8, 3, 3, 0, 2), 2 * 1 * 4 * 4 * 8 * 3 * 3 * 16),  # P = Q = (9-3)//2+1 = 4
    ((4, 32, 7, 7, 64, 1, 1, 0, 1), 2 * 4 * 7 * 7 * 64 * 32),        # 1x1
])
def test_convolution_counts_every_pass_alike(geometry, expected):
    N, C, H, W, K, R, S, pad, stride = geometry
    be = make_backend(batch_size=N)
    plan = ConvPlan(N, C, H, W, K, R, S, pad=pad, stride=stride)
    x, f, o = be.zeros(plan.in_shape), be.zeros(plan.filter_shape), be.zeros(plan.out_shape)
    assert op_cost("fprop_conv", (plan, x, f, o), {})[0] == expected
    assert op_cost("bprop_conv", (plan, f, o, x), {})[0] == expected
    assert op_cost("update_conv", (plan, x, o, f), {})[0] == expected


def _op_flops(layer, in_shape, batch, pass_="fprop"):
    """FLOPs per backend op name recorded inside one fprop (or fprop + bprop) of ``layer``."""
    be = make_backend(batch_size=batch)
    model = Model([layer])
    model.initialize(_Shape(in_shape))
    x = be.array(np.random.default_rng(0).random((batch,) + in_shape))
    rec = Recorder()
    wrappers = Instrumentation(rec)
    wrappers.attach(model, GradientDescentMomentum(0.1))
    try:
        y = model.fprop(x)
        if pass_ == "bprop":
            model.bprop(be.array(np.ones(y.shape)))
    finally:
        wrappers.detach()
    rec.resolve()
    totals = {}
    for span in rec.spans:
        if span.cat == "op":
            totals[span.name] = totals.get(span.name, 0.0) + span.flops
    top = [s for s in rec.spans if s.cat == "fprop" and s.parent is None]
    return totals, top


def test_dense_attention_counts_every_pair():
    N, T, d, H = 2, 32, 16, 2
    dh = d // H
    totals, top = _op_flops(MultiHeadAttention(d, H, causal=False), (T, d), N)
    assert totals["attention"] == N * H * T * T * (2 * dh + 2 * dh)   # Q K^T and P V
    assert totals["compound_dot"] == 2 * N * T * d * 3 * d + 2 * N * T * d * d
    assert top[0].flops == sum(totals.values())
    grads, _ = _op_flops(MultiHeadAttention(d, H, causal=False), (T, d), N, "bprop")
    assert grads["attention_bprop"] == N * H * T * T * (6 * dh + 4 * dh)


def test_causal_attention_counts_only_visible_pairs():
    # query i sees keys 0..i: 1 + 2 + ... + T = T (T + 1) / 2 pairs per head
    N, T, d, H = 1, 128, 16, 2
    dh = d // H
    totals, _ = _op_flops(MultiHeadAttention(d, H, causal=True), (T, d), N)
    assert totals["attention"] == N * H * (T * (T + 1) // 2) * 4 * dh
    dense, _ = _op_flops(MultiHeadAttention(d, H, causal=False), (T, d), N)
    assert totals["attention"] == dense["attention"] * (T + 1) / (2 * T)


def test_decoding_offset_causal_pairs():
    # 4 new queries against 10 cached keys: query i sees keys 0 .. i + 6
    assert visible_pairs(4, 10, causal=True) == 7 + 8 + 9 + 10
    assert visible_pairs(4, 10, causal=False, heads=3) == 3 * 40


def test_block_sparse_attention_counts_only_visited_blocks():
    # a 4 x 4 grid of 8 x 8 blocks, all set, made causal: the 6 blocks below the diagonal are
    # whole (64 pairs) and the 4 on it half and diagonal (36 pairs), per head
    N, T, d, H, bs = 2, 32, 16, 2, 8
    dh = d // H
    layer = BlockSparseAttention(H, np.ones((4, 4), dtype=np.int8), block_size=bs,
                                 causal=True)
    totals, _ = _op_flops(layer, (T, d), N)
    pairs = N * H * (6 * bs * bs + 4 * bs * (bs + 1) // 2)
    assert totals["attention"] == pairs * 4 * dh
    assert "blocksparse_sdd" not in totals


def test_block_layout_pairs_per_head():
    from neonlite.backends.shared.attention_tables import AttentionBlocks
    layout = np.zeros((2, 2, 2), dtype=np.int8)
    layout[0] = [[1, 0], [0, 1]]      # head 0: diagonal blocks
    layout[1] = [[1, 1], [1, 1]]      # head 1: everything
    blocks = AttentionBlocks(layout, 4, 4)
    assert visible_pairs(8, 8, blocks=blocks, heads=2) == 2 * 16 + 64
    assert visible_pairs(8, 8, causal=True, blocks=blocks, heads=2) == 2 * 10 + 36


def test_elementwise_optree_counts_one_flop_per_node_and_element():
    be = make_backend(batch_size=2)
    a, b, out = be.zeros((4, 5)), be.zeros((4, 5)), be.zeros((4, 5))
    flops, nbytes = op_cost("execute", (out, a * b + 2.0 * a), {})
    assert flops == 3 * 20          # mul, mul, add over 20 elements
    assert nbytes == 3 * 20 * 4     # a and b read once, out written


@pytest.mark.parametrize("cell", ["LSTM", "GRU"])
def test_recurrent_layers_ops_are_timed_and_counted(cell):
    """The profiler times a recurrent layer's own ops (the cell's whole-sequence passes):
    before the op table gave every op its cost they were missing from the profile.  The
    forward sequence counts its T recurrent GEMMs and the gate work (op table,
    ``ops/recurrent.py``)."""
    from neonlite import layers
    from neonlite.backends.ops.recurrent import STEP_FLOPS
    N, T, F, H = 3, 5, 4, 6
    totals, _ = _op_flops(getattr(layers, cell)(H), (T, F), N, "bprop")
    name = cell.lower()
    G = {"lstm": 4, "gru": 3}[name] * H
    assert totals[f"{name}_fprop_sequence"] == 2.0 * N * G * H * T + \
        STEP_FLOPS[name][0] * T * N * H
    assert totals[f"{name}_bprop_sequence"] > 0
