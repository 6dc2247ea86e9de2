"""The GPU backend's block-sparse plans and launches.  The ops are dispatched by the op table
(``backends/ops/blocksparse.py``: operands, check, reference, kernels, cost): the backend's
``run_op`` runs the row's check and checks the operands contiguous and of one storage, then
launches ``kernels/cuda/blocksparse.cu``: one tile GEMM per thread block, on tensor cores
(mma.sync m16n8k16, float32 accumulation) for float16 and bfloat16 storage and on the CUDA
cores for float32; the row softmax and its gradient take one thread per query row.  What is
left here is the backend's choice: :data:`LAUNCHES`, each op's grid and which of the plan's
device tables its kernel walks.  The layout's lookup tables are copied to the device once per
plan (:class:`GPUBlockSparsePlan`)."""
import numpy as np

from ..blocksparse_plan import BlockSparsePlan

_TABLES = ("head", "row", "col", "row_ptr", "row_k", "row_other", "col_ptr", "col_k",
           "col_other")


class GPUBlockSparsePlan(BlockSparsePlan):
    """A :class:`BlockSparsePlan` with its lookup tables copied to the device at configure
    time (``device_tables``: name -> int32 tensor of backend ``be``)."""

    def __init__(self, layout, block_size, be):
        super().__init__(layout, block_size)
        self.device_tables = {name: be.array(np.asarray(getattr(self.tables, name)),
                                             dtype=np.int32) for name in _TABLES}


def _tables(plan):
    if not isinstance(plan, GPUBlockSparsePlan):
        raise TypeError(f"a GPU block-sparse op needs the plan of this backend's "
                        f"blocksparse_layer, got {type(plan).__name__}")
    return plan.device_tables


def _product(plan, x, w, y, walk, transw, beta):
    tb = _tables(plan)
    M = x.shape[0]
    nb_in, nb_out = x.shape[1] // plan.bs, y.shape[1] // plan.bs
    ptr, kidx, other = (tb[f"{walk}_{n}"] for n in ("ptr", "k", "other"))
    return [(((M + 63) // 64, nb_out),
             [x.ptr, w.ptr, y.ptr, M, nb_in, nb_out, plan.bs, ptr.ptr, kidx.ptr, other.ptr,
              int(transw), np.float32(beta)])]


def _fprop(be, plan, x, w, y):
    return _product(plan, x, w, y, "col", False, 0.0)


def _bprop(be, plan, e, w, dx, beta):
    return _product(plan, e, w, dx, "row", True, beta)


def _update(be, plan, x, e, dw, beta):
    tb = _tables(plan)
    M, nin = x.shape
    return [((plan.nnz, 1), [x.ptr, e.ptr, dw.ptr, M, nin, e.shape[1], plan.bs, tb["row"].ptr,
                             tb["col"].ptr, np.float32(beta)])]


def _sdd(be, plan, a, b, s, alpha):
    tb = _tables(plan)
    N, H, Tq, d = a.shape
    return [((plan.nnz, N), [a.ptr, b.ptr, s.ptr, H, Tq, b.shape[2], d, plan.bs, plan.nnz,
                             tb["head"].ptr, tb["row"].ptr, tb["col"].ptr,
                             np.float32(alpha)])]


def _dsd(be, plan, p, b, o, transposed, beta):
    tb = _tables(plan)
    walk = "col" if transposed else "row"
    N, H, Tin, d = b.shape
    Tout = o.shape[2]
    grid = (H * (Tout // plan.bs), N, (d + 63) // 64)
    return [(grid, [p.ptr, b.ptr, o.ptr, H, Tin, Tout, d, plan.bs, plan.nnz,
                    tb[f"{walk}_ptr"].ptr, tb[f"{walk}_k"].ptr, tb[f"{walk}_other"].ptr,
                    int(bool(transposed)), np.float32(beta)])]


def _softmax(be, plan, s, p, scale, causal):
    tb = _tables(plan)
    off = (plan.cols - plan.rows) * plan.bs
    return [((plan.heads * plan.rows, s.shape[0]),
             [s.ptr, p.ptr, plan.bs, plan.nnz, off, tb["row_ptr"].ptr, tb["row"].ptr,
              tb["col"].ptr, np.float32(scale), int(bool(causal))])]


def _softmax_bprop(be, plan, p, dp, ds, scale):
    tb = _tables(plan)
    return [((plan.heads * plan.rows, p.shape[0]),
             [p.ptr, dp.ptr, ds.ptr, plan.bs, plan.nnz, tb["row_ptr"].ptr,
              np.float32(scale)])]


#: op name -> its launches, ``launches(be, plan, *tensors, *scalars)`` -> [(grid, arguments)]
#: in the order of the row's ``kernel.launches`` (``PLAN_LAUNCHES``)
LAUNCHES = {"blocksparse_fprop": _fprop, "blocksparse_bprop": _bprop,
            "blocksparse_update": _update, "blocksparse_sdd": _sdd, "blocksparse_dsd": _dsd,
            "blocksparse_softmax": _softmax, "blocksparse_softmax_bprop": _softmax_bprop}
