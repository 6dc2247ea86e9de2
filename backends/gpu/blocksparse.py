"""The GPU backend's block-sparse ops (``kernels/cuda/blocksparse.cu``): one tile GEMM per
thread block, on tensor cores (mma.sync m16n8k16, float32 accumulation) for float16 and
bfloat16 storage and on the CUDA cores for float32; the row softmax and its gradient take one
thread per query row.  The layout's lookup tables are copied to the device once per plan."""
import numpy as np

from ..blocksparse_plan import BlockSparsePlan
from ..operand_sizes import check_contiguous
from ..ops import OPS

_TABLES = ("head", "row", "col", "row_ptr", "row_k", "row_other", "col_ptr", "col_k",
           "col_other")
_THREADS = 128


def _check(what, **operands):
    """The storage of ``operands``, each contiguous (ValueError naming the first that is not;
    their element types are checked by the row's check)."""
    check_contiguous(what, **operands)
    return next(iter(operands.values())).storage


class GPUBlockSparsePlan(BlockSparsePlan):
    """A :class:`BlockSparsePlan` with its lookup tables copied to the device at configure
    time (``device_tables``: name -> int32 tensor of backend ``be``)."""

    def __init__(self, layout, block_size, be):
        super().__init__(layout, block_size)
        self.device_tables = {name: be.array(np.asarray(getattr(self.tables, name)),
                                             dtype=np.int32) for name in _TABLES}


class GPUBlockSparseOps:
    """``Backend.blocksparse_*`` for :class:`~neonlite.backends.gpu.backend.GPUBackend`."""

    def blocksparse_layer(self, layout, block_size):
        return GPUBlockSparsePlan(layout, block_size, self)

    @staticmethod
    def _bs_tables(plan):
        if not isinstance(plan, GPUBlockSparsePlan):
            raise TypeError(f"a GPU block-sparse op needs the plan of this backend's "
                            f"blocksparse_layer, got {type(plan).__name__}")
        return plan.device_tables

    def _bs_launch(self, name, storage, arg_format, grid, threads, args):
        func = self.kernel("blocksparse", f"nl_bs_{name}_{storage}", arg_format)
        self.device.launch(func, grid, (threads, 1, 1), args)

    # ---- block-sparse weights -----------------------------------------------------------------
    def _bs_product(self, op, plan, x, w, y, walk, transw, beta):
        storage = _check(op, **{"x" if walk == "col" else "e": x, "w": w,
                                "y" if walk == "col" else "dx": y})
        tb = self._bs_tables(plan)
        M = x.shape[0]
        nb_in, nb_out = x.shape[1] // plan.bs, y.shape[1] // plan.bs
        ptr, kidx, other = (tb[f"{walk}_{n}"] for n in ("ptr", "k", "other"))
        self._bs_launch("product", storage, "PPPiiiiPPPif", ((M + 63) // 64, nb_out),
                        _THREADS, [x.ptr, w.ptr, y.ptr, M, nb_in, nb_out, plan.bs, ptr.ptr,
                                   kidx.ptr, other.ptr, int(transw), np.float32(beta)])
        return y

    def blocksparse_fprop(self, plan, x, w, y):
        OPS["blocksparse_fprop"].check("blocksparse_fprop", plan, x=x, w=w, y=y)
        return self._bs_product("blocksparse_fprop", plan, x, w, y, "col", False, 0.0)

    def blocksparse_bprop(self, plan, e, w, dx, beta=0.0):
        OPS["blocksparse_bprop"].check("blocksparse_bprop", plan, e=e, w=w, dx=dx)
        return self._bs_product("blocksparse_bprop", plan, e, w, dx, "row", True, beta)

    def blocksparse_update(self, plan, x, e, dw, beta=0.0):
        OPS["blocksparse_update"].check("blocksparse_update", plan, x=x, e=e, dw=dw)
        storage = _check("blocksparse_update", x=x, e=e, dw=dw)
        tb = self._bs_tables(plan)
        M, nin = x.shape
        self._bs_launch("update", storage, "PPPiiiiPPf", (plan.nnz, 1), _THREADS,
                        [x.ptr, e.ptr, dw.ptr, M, nin, e.shape[1], plan.bs, tb["row"].ptr,
                         tb["col"].ptr, np.float32(beta)])
        return dw

    # ---- block-sparse attention ---------------------------------------------------------------
    def blocksparse_sdd(self, plan, a, b, s, alpha=1.0):
        OPS["blocksparse_sdd"].check("blocksparse_sdd", plan, a=a, b=b, s=s)
        storage = _check("blocksparse_sdd", a=a, b=b, s=s)
        tb = self._bs_tables(plan)
        N, H, Tq, d = a.shape
        self._bs_launch("sdd", storage, "PPPiiiiiiPPPf", (plan.nnz, N), _THREADS,
                        [a.ptr, b.ptr, s.ptr, H, Tq, b.shape[2], d, plan.bs, plan.nnz,
                         tb["head"].ptr, tb["row"].ptr, tb["col"].ptr, np.float32(alpha)])
        return s

    def blocksparse_dsd(self, plan, p, b, o, transposed=False, beta=0.0):
        OPS["blocksparse_dsd"].check("blocksparse_dsd", plan, transposed, p=p, b=b, o=o)
        storage = _check("blocksparse_dsd", p=p, b=b, o=o)
        tb = self._bs_tables(plan)
        walk = "col" if transposed else "row"
        N, H, Tin, d = b.shape
        Tout = o.shape[2]
        grid = (H * (Tout // plan.bs), N, (d + 63) // 64)
        self._bs_launch("dsd", storage, "PPPiiiiiiPPPif", grid, _THREADS,
                        [p.ptr, b.ptr, o.ptr, H, Tin, Tout, d, plan.bs, plan.nnz,
                         tb[f"{walk}_ptr"].ptr, tb[f"{walk}_k"].ptr, tb[f"{walk}_other"].ptr,
                         int(bool(transposed)), np.float32(beta)])
        return o

    def blocksparse_softmax(self, plan, s, p, scale=1.0, causal=False):
        OPS["blocksparse_softmax"].check("blocksparse_softmax", plan, s=s, p=p)
        storage = _check("blocksparse_softmax", s=s, p=p)
        tb = self._bs_tables(plan)
        off = (plan.cols - plan.rows) * plan.bs
        self._bs_launch("softmax", storage, "PPiiiPPPfi", (plan.heads * plan.rows, s.shape[0]),
                        64, [s.ptr, p.ptr, plan.bs, plan.nnz, off, tb["row_ptr"].ptr,
                             tb["row"].ptr, tb["col"].ptr, np.float32(scale), int(bool(causal))])
        return p

    def blocksparse_softmax_bprop(self, plan, p, dp, ds, scale=1.0):
        OPS["blocksparse_softmax_bprop"].check("blocksparse_softmax_bprop", plan, p=p, dp=dp,
                                               ds=ds)
        storage = _check("blocksparse_softmax_bprop", p=p, dp=dp, ds=ds)
        tb = self._bs_tables(plan)
        self._bs_launch("softmax_bprop", storage, "PPPiiPf", (plan.heads * plan.rows,
                                                              p.shape[0]),
                        64, [p.ptr, dp.ptr, ds.ptr, plan.bs, plan.nnz, tb["row_ptr"].ptr,
                             np.float32(scale)])
        return ds
