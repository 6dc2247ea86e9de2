"""The fused attention CUDA kernels (``kernels/cuda/flash_attention.cu``) on the host emulator
against the numpy reference: float32, float16 and bfloat16 storage, causal cross-attention with
a padding mask, unequal head widths, a block layout, and a query block read from a longer
key/value cache.  This checks indexing and masking logic, not speed; the kernels have not run
on a GPU."""
from pathlib import Path

import numpy as np
import pytest
from support.cuda_host_emulator import HostModule
from support.requires import requires
from test_blocksparse_gpu_kernels import STORAGE, check

from neonlite.backends.reference import attention as numpy_attention
from neonlite.backends.reference.attention import visit_tables
from neonlite.backends.reference.attention import AttentionBlocks
from neonlite.kernels import specs

pytestmark = requires("emulator")
CUDA = Path(specs.find("flash_attention").root) / "cuda"
NARGS = {"nl_fa_fprop": 20, "nl_fa_bprop_kv": 19, "nl_fa_bprop_q": 18}
TILE = 32


@pytest.fixture(scope="module")
def module():
    spec = specs.find("flash_attention")
    kernels = {name: NARGS[name.rsplit("_", 1)[0]] for name in spec.functions}
    return HostModule([spec.source_path.read_text()], kernels,
                      prelude=(CUDA / "neonlite_common.cuh").read_text())


CASES = {  # N, H, Tq, Tk, dk, dv, causal, padded, blocked
    "cross causal padded": (1, 2, 40, 70, 16, 16, True, True, False),
    "dk!=dv": (2, 1, 33, 33, 8, 24, False, False, False),
    "blocks": (1, 2, 64, 96, 16, 16, True, False, True),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("storage", ("f32", "bf16", "f16"))
def test_forward_and_backward_match_the_reference(module, case, storage):
    to_dev, to_host, tol = STORAGE[storage]
    N, H, Tq, Tk, dk, dv, causal, padded, blocked = CASES[case]
    B, rng = N * H, np.random.default_rng(len(case))
    q, k, v, dout = (to_host(to_dev(rng.normal(size=s))) for s in
                     ((B, Tq, dk), (B, Tk, dk), (B, Tk, dv), (B, Tq, dv)))
    mask = None
    if padded:
        mask = to_host(to_dev((rng.random((N, Tk)) > 0.3).astype(np.float64)))
    nqb, nkb = -(-Tq // TILE), -(-Tk // TILE)
    layout = rng.random((H, nqb, nkb)) > 0.4 if blocked else np.ones((1, nqb, nkb))
    blocks = AttentionBlocks(layout, TILE, TILE) if blocked else None
    row_ptr, cols, col_ptr, rows = visit_tables(layout, Tq, Tk, TILE, TILE, causal)
    want_o, want_l = np.zeros((B, Tq, dv)), np.zeros((B, Tq))
    numpy_attention.attention(q, k, v, want_o, want_l, 0.3, causal, mask, None, blocks, H)
    grads = [np.zeros(a.shape) for a in (q, k, v)]
    numpy_attention.attention_bprop(q, k, v, want_o, want_l, dout, *grads, 0.3, causal, mask,
                                    None, blocks, H)
    km = 0 if mask is None else to_dev(mask)
    out, lse = to_dev(np.zeros((B, Tq, dv))), np.zeros((B, Tq), np.float32)
    qd, kd, vd = to_dev(q), to_dev(k), to_dev(v)
    module.launch(f"nl_fa_fprop_{storage}", (nqb, B), (128,),
                  [qd, kd, vd, out, lse, H, Tq, Tk, dk, dv, Tq * dk, Tk * dk, Tk * dv, Tq * dv,
                   0.3, int(causal), km, row_ptr, cols, layout.shape[0]])
    check(to_host(out), want_o, tol, "out")
    finite = np.isfinite(want_l)
    assert (np.isfinite(lse) == finite).all()
    check(lse[finite], want_l[finite], tol, "lse")
    dq, dk_, dv_ = (to_dev(np.zeros(a.shape)) for a in (q, k, v))
    od, dod = to_dev(want_o), to_dev(dout)
    module.launch(f"nl_fa_bprop_kv_{storage}", (nkb, B), (128,),
                  [qd, kd, vd, od, lse, dod, dk_, dv_, H, Tq, Tk, dk, dv, 0.3, int(causal), km,
                   col_ptr, rows, layout.shape[0]])
    module.launch(f"nl_fa_bprop_q_{storage}", (nqb, B), (128,),
                  [qd, kd, vd, od, lse, dod, dq, H, Tq, Tk, dk, dv, 0.3, int(causal), km,
                   row_ptr, cols, layout.shape[0]])
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
    row_ptr, cols, _, _ = visit_tables(np.ones((1, 1, -(-L // TILE))), 1, L, TILE, TILE, True)
    out, lse = np.zeros((B, 1, d), np.float32), np.zeros((B, 1), np.float32)
    module.launch("nl_fa_fprop_f32", (1, B), (128,),
                  [q, kc, vc, out, lse, 1, 1, L, d, d, d, max_len * d, max_len * d, d, 0.25, 1,
                   0, row_ptr, cols, 1])
    check(out, want_o, 1e-5, "out")
    check(lse, want_l, 1e-5, "lse")
