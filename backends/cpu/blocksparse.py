"""The CPU backend's block-sparse ops: C kernels (``kernels/cpu/blocksparse.c``, OpenMP over
output blocks, register-tiled products per block) for contiguous float32/float64 arrays, and
the op-table rows' references (``backends/ops/blocksparse.py``, walking the same tables) for
every other case.  Each op runs its row's operand check first; what is left here is the
backend's choice: which of the plan's tables each kernel walks and the pack buffers it
takes.  The tables and the pack buffers live on the plan (:class:`CPUBlockSparsePlan`),
made on first use."""
import numpy as np

from ..blocksparse_plan import BlockSparsePlan
from ..ops import OPS

TABLES = ("head", "row", "col", "row_ptr", "row_k", "row_other", "col_ptr", "col_k",
          "col_other")


class CPUBlockSparsePlan(BlockSparsePlan):
    """A :class:`BlockSparsePlan` with the tables as int32 arrays (``int32_tables``, made at
    configure time) and, per kernel module, their cffi pointers; pack buffers by name."""

    def __init__(self, layout, block_size):
        super().__init__(layout, block_size)
        self.int32_tables = {name: np.ascontiguousarray(getattr(self.tables, name),
                                                        dtype=np.int32) for name in TABLES}
        self._pointers = {}
        self._work = {}

    def table_pointers(self, module):
        """The tables as ``int32_t *`` of ``module``'s ffi (kept while the plan lives)."""
        found = self._pointers.get(id(module))
        if found is None or found[0] is not module:
            ffi = module.ffi
            found = self._pointers[id(module)] = (module, {
                name: ffi.cast("int32_t *", ffi.from_buffer(a))
                for name, a in self.int32_tables.items()})
        return found[1]

    def work(self, name, size, dtype):
        """A work buffer of at least ``size`` elements of ``dtype`` kept under ``name``."""
        buf = self._work.get((name, dtype))
        if buf is None or buf.size < size:
            buf = self._work[(name, dtype)] = np.empty(max(size, 1), dtype=dtype)
        return buf

    def buffers(self):
        return super().buffers() + list(self._work.values())


def _real(module, a):
    return module.ffi.cast("real *", module.ffi.from_buffer(a))


def _fprop_call(lib, module, tb, plan, x, w, y):
    M, nin = x.shape
    pack = plan.work("task_in", lib.bs_threads() * lib.bs_task_rows() * nin, x.dtype)
    lib.bs_linear_fprop(_real(module, x), _real(module, w), _real(module, y), M, nin,
                        y.shape[1], plan.bs, tb["col_ptr"], tb["col_k"], tb["col_other"],
                        _real(module, pack))


def _bprop_call(lib, module, tb, plan, e, w, dx, beta=0.0):
    M, nout = e.shape
    pack = plan.work("task_out", lib.bs_threads() * lib.bs_task_rows() * nout, e.dtype)
    wt = plan.work("wt", w.size, w.dtype)
    lib.bs_linear_bprop(_real(module, e), _real(module, w), _real(module, dx), M, dx.shape[1],
                        nout, plan.bs, plan.nnz, tb["row_ptr"], tb["row_k"], tb["row_other"],
                        _real(module, pack), _real(module, wt), beta)


def _update_call(lib, module, tb, plan, x, e, dw, beta=0.0):
    M, nin = x.shape
    nout = e.shape[1]
    rows = lib.bs_chunk_rows()
    packx = plan.work("pack_in", rows * nin, x.dtype)
    packe = plan.work("pack_out", rows * nout, x.dtype)
    lib.bs_linear_update(_real(module, x), _real(module, e), _real(module, dw), M, nin, nout,
                         plan.bs, plan.nnz, tb["row"], tb["col"], _real(module, packx),
                         _real(module, packe), beta)


def _sdd_call(lib, module, tb, plan, a, b, s, alpha=1.0):
    N, H, Tq, d = a.shape
    work = plan.work("sdd_bt", lib.bs_threads() * d * plan.bs, a.dtype)
    lib.bs_sdd(_real(module, a), _real(module, b), _real(module, s), N, H, Tq, b.shape[2], d,
               plan.bs, plan.nnz, tb["head"], tb["row"], tb["col"], alpha, _real(module, work))


def _dsd_call(lib, module, tb, plan, p, b, o, transposed=False, beta=0.0):
    walk = ("col_ptr", "col_k", "col_other") if transposed else \
        ("row_ptr", "row_k", "row_other")
    N, H, Tin, d = b.shape
    work = plan.work("dsd_pt", lib.bs_threads() * plan.bs * plan.bs, p.dtype)
    lib.bs_dsd(_real(module, p), _real(module, b), _real(module, o), N, H, Tin, o.shape[2], d,
               plan.bs, plan.nnz, *(tb[n] for n in walk), int(bool(transposed)), beta,
               _real(module, work))


def _softmax_call(lib, module, tb, plan, s, p, scale=1.0, causal=False):
    lib.bs_softmax(_real(module, s), _real(module, p), s.shape[0], plan.heads * plan.rows,
                   plan.rows, plan.cols, plan.bs, plan.nnz, tb["row_ptr"], tb["row"],
                   tb["col"], scale, int(bool(causal)))


def _softmax_bprop_call(lib, module, tb, plan, p, dp, ds, scale=1.0):
    lib.bs_softmax_bprop(_real(module, p), _real(module, dp), _real(module, ds), p.shape[0],
                         plan.heads * plan.rows, plan.bs, plan.nnz, tb["row_ptr"], scale)


#: op name -> its C call: ``call(lib, module, tables, plan, *arrays, *scalars)``
CALLS = {"blocksparse_fprop": _fprop_call, "blocksparse_bprop": _bprop_call,
         "blocksparse_update": _update_call, "blocksparse_sdd": _sdd_call,
         "blocksparse_dsd": _dsd_call, "blocksparse_softmax": _softmax_call,
         "blocksparse_softmax_bprop": _softmax_bprop_call}
#: the rows of those ops (operand check, reference), by name
ROWS = {name: OPS[name] for name in CALLS}


class CPUBlockSparseOps:
    """``Backend.blocksparse_*`` for the CPU backend (mixed into ``CPUBackend``; uses its
    ``kernels``): each op is its row's check, then its C call (:data:`CALLS`) when the
    kernels take the arrays, else the row's reference."""

    def blocksparse_layer(self, layout, block_size):
        return CPUBlockSparsePlan(layout, block_size)

    def _blocksparse(self, name, plan, tensors, scalars=(), flags=()):
        """Run op ``name`` on ``tensors`` (name -> tensor, in the row's order) and
        ``scalars``; ``flags``: the scalars the row's check takes too (dsd's ``transposed``).
        Returns the last tensor (the output)."""
        row = ROWS[name]
        row.check(name, plan, *flags, **tensors)
        arrays = [t._ary for t in tensors.values()]
        module = self.kernels.usable("blocksparse", *arrays)
        if module is None:
            row.reference(plan, *arrays, *scalars)
        else:
            if not isinstance(plan, CPUBlockSparsePlan):
                raise TypeError(f"a CPU block-sparse op needs the plan of this backend's "
                                f"blocksparse_layer, got {type(plan).__name__}")
            CALLS[name](module.lib, module, plan.table_pointers(module), plan, *arrays,
                        *scalars)
        return list(tensors.values())[-1]

    def blocksparse_fprop(self, plan, x, w, y):
        return self._blocksparse("blocksparse_fprop", plan, {"x": x, "w": w, "y": y})

    def blocksparse_bprop(self, plan, e, w, dx, beta=0.0):
        return self._blocksparse("blocksparse_bprop", plan, {"e": e, "w": w, "dx": dx}, (beta,))

    def blocksparse_update(self, plan, x, e, dw, beta=0.0):
        return self._blocksparse("blocksparse_update", plan, {"x": x, "e": e, "dw": dw},
                                 (beta,))

    def blocksparse_sdd(self, plan, a, b, s, alpha=1.0):
        return self._blocksparse("blocksparse_sdd", plan, {"a": a, "b": b, "s": s}, (alpha,))

    def blocksparse_dsd(self, plan, p, b, o, transposed=False, beta=0.0):
        return self._blocksparse("blocksparse_dsd", plan, {"p": p, "b": b, "o": o},
                                 (transposed, beta), (transposed,))

    def blocksparse_softmax(self, plan, s, p, scale=1.0, causal=False):
        return self._blocksparse("blocksparse_softmax", plan, {"s": s, "p": p},
                                 (scale, causal))

    def blocksparse_softmax_bprop(self, plan, p, dp, ds, scale=1.0):
        return self._blocksparse("blocksparse_softmax_bprop", plan, {"p": p, "dp": dp,
                                                                     "ds": ds}, (scale,))
