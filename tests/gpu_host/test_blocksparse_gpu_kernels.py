"""The block-sparse CUDA kernels (``kernels/cuda/blocksparse.cu``) on the host emulator: the
float32 path and the bfloat16 / float16 tensor-core path (mma.sync m16n8k16 emulated from its
PTX fragment layout) against the numpy reference, for every block size.  This checks indexing
and fragment layout, not speed; the GPU measurements need a GPU."""
from pathlib import Path

import numpy as np
import pytest
from support.cuda_host_emulator import HostModule
from support.requires import requires

from neonlite.blocksparse import compile_layout, layouts
from neonlite.backends.reference import blocksparse as ref
from neonlite.kernels import specs

pytestmark = requires("emulator")
CUDA = Path(specs.find("blocksparse").root) / "cuda"
NARGS = {"nl_bs_product": 12, "nl_bs_update": 10, "nl_bs_sdd": 13, "nl_bs_dsd": 14,
         "nl_bs_softmax": 10, "nl_bs_softmax_bprop": 7}


@pytest.fixture(scope="module")
def module():
    spec = specs.find("blocksparse")
    kernels = {name: NARGS[name.rsplit("_", 1)[0]] for name in spec.functions}
    return HostModule([spec.source_path.read_text()], kernels,
                      prelude=(CUDA / "neonlite_common.cuh").read_text())


def bf16_bits(a):
    bits = np.asarray(a, dtype=np.float32).view(np.uint32)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


def from_bf16(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


STORAGE = {"f32": (lambda a: np.asarray(a, np.float32), lambda a: a.astype(np.float64), 1e-4),
           "bf16": (bf16_bits, from_bf16, 2e-2),
           "f16": (lambda a: np.asarray(a, np.float16).view(np.uint16),
                   lambda a: a.view(np.float16).astype(np.float64), 4e-3)}


def tables(layout):
    t = compile_layout(layout)
    return t, {n: np.ascontiguousarray(getattr(t, n), dtype=np.int32)
               for n in ("head", "row", "col", "row_ptr", "row_k", "row_other", "col_ptr",
                         "col_k", "col_other")}


def check(got, want, tol, what):
    scale = max(1.0, np.abs(want).max())
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * scale, err_msg=what)


@pytest.mark.parametrize("bs", (8, 16, 32, 64))
@pytest.mark.parametrize("storage", ("f32", "bf16"))
def test_weight_products(module, bs, storage):
    to_dev, to_host, tol = STORAGE[storage]
    rng = np.random.default_rng(bs)
    layout = layouts.random((3, 2), 0.5, seed=bs)
    layout[0] = 1
    layout[1] = 0
    t, tb = tables(layout)
    M = 70
    x = to_host(to_dev(rng.normal(size=(M, 3 * bs))))
    e = to_host(to_dev(rng.normal(size=(M, 2 * bs))))
    w = to_host(to_dev(rng.normal(size=(t.nnz, bs, bs))))
    y = to_dev(np.zeros((M, 2 * bs)))
    module.launch(f"nl_bs_product_{storage}", ((M + 63) // 64, 2), (128,),
                  [to_dev(x), to_dev(w), y, M, 3, 2, bs, tb["col_ptr"], tb["col_k"],
                   tb["col_other"], 0, 0.0])
    check(to_host(y), ref.linear_fprop(t, x, w, bs), tol, "fprop")
    dx0 = rng.normal(size=(M, 3 * bs))
    dx = to_dev(dx0)
    module.launch(f"nl_bs_product_{storage}", ((M + 63) // 64, 3), (128,),
                  [to_dev(e), to_dev(w), dx, M, 2, 3, bs, tb["row_ptr"], tb["row_k"],
                   tb["row_other"], 1, 1.0])
    check(to_host(dx), ref.linear_bprop(t, e, w, bs) + to_host(to_dev(dx0)), tol, "bprop")
    dw = to_dev(np.zeros((t.nnz, bs, bs)))
    module.launch(f"nl_bs_update_{storage}", (t.nnz,), (128,),
                  [to_dev(x), to_dev(e), dw, M, 3 * bs, 2 * bs, bs, tb["row"], tb["col"], 0.0])
    check(to_host(dw), ref.linear_update(t, x, e, bs), tol, "update")


@pytest.mark.parametrize("bs,storage", [(8, "f32"), (16, "f16"), (32, "bf16"), (64, "f32")])
def test_attention_ops(module, bs, storage):
    to_dev, to_host, tol = STORAGE[storage]
    rng = np.random.default_rng(bs + 1)
    N, H, nq, nk, d = 1, 2, 2, 3, 24
    layout = layouts.causal(layouts.local((H, nq, nk), 2))
    layout[1, 0] = 0
    t, tb = tables(layout)
    q = to_host(to_dev(rng.normal(size=(N, H, nq * bs, d))))
    k = to_host(to_dev(rng.normal(size=(N, H, nk * bs, d))))
    s = to_dev(np.zeros((N, t.nnz, bs, bs)))
    module.launch(f"nl_bs_sdd_{storage}", (t.nnz, N), (128,),
                  [to_dev(q), to_dev(k), s, H, nq * bs, nk * bs, d, bs, t.nnz, tb["head"],
                   tb["row"], tb["col"], 0.5])
    check(to_host(s), ref.sdd(t, q, k, bs, 0.5), tol, "sdd")
    s_host = to_host(s)
    p = to_dev(np.zeros(s_host.shape))
    module.launch(f"nl_bs_softmax_{storage}", (H * nq, N), (64,),
                  [to_dev(s_host), p, bs, t.nnz, (nk - nq) * bs, tb["row_ptr"], tb["row"],
                   tb["col"], 0.7, 1])
    p_host = to_host(p)
    check(p_host, ref.softmax(t, s_host, bs, 0.7, True), tol, "softmax")
    dp = to_host(to_dev(rng.normal(size=s_host.shape)))
    ds = to_dev(np.zeros(s_host.shape))
    module.launch(f"nl_bs_softmax_bprop_{storage}", (H * nq, N), (64,),
                  [to_dev(p_host), to_dev(dp), ds, bs, t.nnz, tb["row_ptr"], 0.7])
    check(to_host(ds), ref.softmax_bprop(t, p_host, dp, 0.7), tol, "softmax bprop")
    o = to_dev(np.zeros((N, H, nq * bs, d)))
    module.launch(f"nl_bs_dsd_{storage}", (H * nq, N, 1), (128,),
                  [to_dev(p_host), to_dev(k), o, H, nk * bs, nq * bs, d, bs, t.nnz,
                   tb["row_ptr"], tb["row_k"], tb["row_other"], 0, 0.0])
    check(to_host(o), ref.dsd(t, p_host, k, bs), tol, "dsd")
    o2 = to_dev(np.zeros((N, H, nk * bs, d)))
    module.launch(f"nl_bs_dsd_{storage}", (H * nk, N, 1), (128,),
                  [to_dev(p_host), to_dev(q), o2, H, nq * bs, nk * bs, d, bs, t.nnz,
                   tb["col_ptr"], tb["col_k"], tb["col_other"], 1, 0.0])
    check(to_host(o2), ref.dsd_t(t, p_host, q, bs), tol, "dsd transposed")
