"""The fused attention CUDA kernels (``kernels/cuda/flash_attention.cu``) on the host emulator
against the numpy reference: both kernel shapes (32-token tiles for heads up to 64, 16-token
tiles for heads up to 128 and 16-token block layouts), float32, float16 and bfloat16 storage,
causal cross-attention with a padding mask, unequal head widths, block layouts, dropout from the
per-example Philox stream (the same keep decisions, regenerated in the backward pass), and a
query block read from a longer key/value cache.  This checks indexing, masking and the dropout
stream, not speed; the kernels are compiled and emulated, not run on a GPU."""
from pathlib import Path

import numpy as np
import pytest
from support.cuda_host_emulator import HostModule
from support.requires import requires
from test_blocksparse_gpu_kernels import STORAGE, check

from neonlite.backends.reference import attention as numpy_attention
from neonlite.backends.gpu.attention import kernel_shape, tile_layout
from neonlite.backends.shared.attention_tables import (AttentionBlocks, AttentionDropout,
                                                       visit_tables)
from neonlite.kernels import specs

pytestmark = requires("emulator")
CUDA = Path(specs.find("flash_attention").root) / "cuda"
NARGS = {"nl_fa_fprop": 29, "nl_fa_bprop_kv": 28, "nl_fa_bprop_q": 27}
NO_DROPOUT = [1.0, 0, 0, 0, 0, 0]
WHOLE_TILES = [0, 0, 0]
DROPOUT = AttentionDropout(keep=0.7, key=2**33 + 5, step=3, stream=11, first=2)


@pytest.fixture(scope="module")
def module():
    spec = specs.find("flash_attention")
    kernels = {name: NARGS[name.rsplit("_", 2)[0]] for name in spec.functions}
    return HostModule([(CUDA / "philox.cuh").read_text(), spec.source_path.read_text()],
                      kernels, prelude=(CUDA / "neonlite_common.cuh").read_text())


def dropout_args(dropout):
    seed = dropout.key
    return [dropout.keep, seed & 0xFFFFFFFF, seed >> 32, dropout.step, dropout.stream,
            dropout.first]


CASES = {  # N, H, Tq, Tk, dk, dv, causal, padded, block size (bq, bk) or 0, dropout
    "cross causal padded": (1, 2, 40, 70, 16, 16, True, True, 0, False),
    "dk!=dv": (2, 1, 33, 33, 8, 24, False, False, 0, False),
    "blocks": (1, 2, 64, 96, 16, 16, True, False, 32, False),
    "dropout causal padded": (2, 2, 37, 45, 16, 8, True, True, 0, True),
    "dropout blocks": (1, 2, 64, 64, 8, 8, False, False, 32, True),
    "wide 96x80 causal padded": (1, 2, 21, 35, 96, 80, True, True, 0, False),
    "wide 128 dropout": (1, 1, 18, 18, 128, 72, False, False, 0, True),
    "blocks of 16": (1, 2, 40, 48, 16, 24, True, True, 16, False),
    "blocks of 16 dropout": (2, 1, 32, 40, 8, 8, False, False, 16, True),
    "blocks of 8 causal padded": (1, 2, 40, 40, 16, 8, True, True, 8, False),
    "blocks of 8 wide dropout": (1, 1, 20, 28, 72, 16, False, False, 8, True),
    "blocks 8x24 dropout": (2, 1, 33, 50, 8, 16, True, False, (8, 24), True),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("storage", ("f32", "bf16", "f16"))
def test_forward_and_backward_match_the_reference(module, case, storage):
    to_dev, to_host, tol = STORAGE[storage]
    N, H, Tq, Tk, dk, dv, causal, padded, block, dropped = CASES[case]
    B, rng = N * H, np.random.default_rng(len(case))
    q, k, v, dout = (to_host(to_dev(rng.normal(size=s))) for s in
                     ((B, Tq, dk), (B, Tk, dk), (B, Tk, dv), (B, Tq, dv)))
    mask = None
    if padded:
        mask = to_host(to_dev((rng.random((N, Tk)) > 0.3).astype(np.float64)))
    blocks, fine = None, WHOLE_TILES
    if block:
        bq, bk = block if isinstance(block, tuple) else (block, block)
        blocks = AttentionBlocks(rng.random((H, -(-Tq // bq), -(-Tk // bk))) > 0.4, bq, bk)
    tile, width = kernel_shape(max(dk, dv), blocks)
    assert (tile, width) == ((32, 64) if max(dk, dv) <= 64 and block != 16 else (16, 128))
    nqb, nkb = -(-Tq // tile), -(-Tk // tile)
    layout = np.ones((1, nqb, nkb))
    if blocks is not None:
        layout = tile_layout(blocks, Tq, Tk, tile)
        if blocks.bq % tile or blocks.bk % tile:
            fine = [blocks.layout.astype(np.uint8), blocks.bq, blocks.bk]
    row_ptr, cols, col_ptr, rows = visit_tables(layout, Tq, Tk, tile, tile, causal)
    dropout = DROPOUT if dropped else None
    drop = dropout_args(DROPOUT) if dropped else NO_DROPOUT
    want_o, want_l = np.zeros((B, Tq, dv)), np.zeros((B, Tq))
    numpy_attention.attention(q, k, v, want_o, want_l, 0.3, causal, mask, dropout, blocks, H)
    grads = [np.zeros(a.shape) for a in (q, k, v)]
    numpy_attention.attention_bprop(q, k, v, want_o, want_l, dout, *grads, 0.3, causal, mask,
                                    dropout, blocks, H)
    name = f"t{tile}d{width}_{storage}"
    km = 0 if mask is None else to_dev(mask)
    out, lse = to_dev(np.zeros((B, Tq, dv))), np.zeros((B, Tq), np.float32)
    qd, kd, vd = to_dev(q), to_dev(k), to_dev(v)
    module.launch(f"nl_fa_fprop_{name}", (nqb, B), (128,),
                  [qd, kd, vd, out, lse, H, Tq, Tk, dk, dv, Tq * dk, Tk * dk, Tk * dv, Tq * dv,
                   0.3, int(causal), km, row_ptr, cols, layout.shape[0], *drop, *fine])
    check(to_host(out), want_o, tol, "out")
    finite = np.isfinite(want_l)
    assert (np.isfinite(lse) == finite).all()
    check(lse[finite], want_l[finite], tol, "lse")
    dq, dk_, dv_ = (to_dev(np.zeros(a.shape)) for a in (q, k, v))
    od, dod = to_dev(want_o), to_dev(dout)
    module.launch(f"nl_fa_bprop_kv_{name}", (nkb, B), (128,),
                  [qd, kd, vd, od, lse, dod, dk_, dv_, H, Tq, Tk, dk, dv, 0.3, int(causal), km,
                   col_ptr, rows, layout.shape[0], *drop, *fine])
    module.launch(f"nl_fa_bprop_q_{name}", (nqb, B), (128,),
                  [qd, kd, vd, od, lse, dod, dq, H, Tq, Tk, dk, dv, 0.3, int(causal), km,
                   row_ptr, cols, layout.shape[0], *drop, *fine])
    for name, got, want in zip(("dq", "dk", "dv"), (dq, dk_, dv_), grads):
        check(to_host(got), want, 3 * tol, name)


def test_decoding_reads_a_window_of_the_cache(module):
    """Tq = 1 against keys 0..L-1 of a (B, max_len, d) cache: the slice strides are the
    cache's."""
    rng = np.random.default_rng(3)
    B, L, max_len, d = 3, 45, 64, 16
    kc, vc = rng.normal(size=(B, max_len, d)).astype(np.float32), \
        rng.normal(size=(B, max_len, d)).astype(np.float32)
    q = rng.normal(size=(B, 1, d)).astype(np.float32)
    want_o, want_l = np.zeros((B, 1, d)), np.zeros((B, 1))
    numpy_attention.attention(q.astype(np.float64), kc[:, :L].astype(np.float64),
                              vc[:, :L].astype(np.float64), want_o, want_l, 0.25, True)
    row_ptr, cols, _, _ = visit_tables(np.ones((1, 1, -(-L // 32))), 1, L, 32, 32, True)
    out, lse = np.zeros((B, 1, d), np.float32), np.zeros((B, 1), np.float32)
    module.launch("nl_fa_fprop_t32d64_f32", (1, B), (128,),
                  [q, kc, vc, out, lse, 1, 1, L, d, d, d, max_len * d, max_len * d, d, 0.25, 1,
                   0, row_ptr, cols, 1, *NO_DROPOUT, *WHOLE_TILES])
    check(out, want_o, 1e-5, "out")
    check(lse, want_l, 1e-5, "lse")
