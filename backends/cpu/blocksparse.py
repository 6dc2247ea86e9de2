"""The CPU backend's block-sparse plans and C calls.  The ops are dispatched by the op table
(``backends/ops/blocksparse.py``: operands, check, reference, kernels, cost): the backend's
``run_op`` runs the row's check, then the C function of ``kernels/cpu/blocksparse.c``
(OpenMP over output blocks, register-tiled products per block) for contiguous
float32/float64 arrays, else the row's reference.  What is left here is the backend's
choice: :data:`CALLS`, which of the plan's tables each kernel walks and the pack buffers it
takes; the tables (as int32 arrays and their pointers) and the pack buffers live on the plan
(:class:`CPUBlockSparsePlan`), made on first use."""
import numpy as np

from ..blocksparse_plan import BlockSparsePlan

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


def _tables(plan, module):
    """The plan's tables as ``module``'s pointers; TypeError for a plan of another backend."""
    if not isinstance(plan, CPUBlockSparsePlan):
        raise TypeError(f"a CPU block-sparse op needs the plan of this backend's "
                        f"blocksparse_layer, got {type(plan).__name__}")
    return plan.table_pointers(module)


def _held(module, a):
    """A work array's C pointer that holds it (a kept call keeps its work arrays)."""
    return module.ffi.from_buffer("real[]", a)


def _fprop_call(module, real, plan, x, w, y):
    lib, tb = module.lib, _tables(plan, module)
    M, nin = x.shape
    pack = plan.work("task_in", lib.bs_threads() * lib.bs_task_rows() * nin, x.dtype)
    return lib.bs_linear_fprop, (real(x), real(w), real(y), M, nin, y.shape[1], plan.bs,
                                 tb["col_ptr"], tb["col_k"], tb["col_other"],
                                 _held(module, pack))


def _bprop_call(module, real, plan, e, w, dx, beta):
    lib, tb = module.lib, _tables(plan, module)
    M, nout = e.shape
    pack = plan.work("task_out", lib.bs_threads() * lib.bs_task_rows() * nout, e.dtype)
    wt = plan.work("wt", w.size, w.dtype)
    return lib.bs_linear_bprop, (real(e), real(w), real(dx), M, dx.shape[1], nout, plan.bs,
                                 plan.nnz, tb["row_ptr"], tb["row_k"], tb["row_other"],
                                 _held(module, pack), _held(module, wt), beta)


def _update_call(module, real, plan, x, e, dw, beta):
    lib, tb = module.lib, _tables(plan, module)
    M, nin = x.shape
    nout = e.shape[1]
    rows = lib.bs_chunk_rows()
    packx = plan.work("pack_in", rows * nin, x.dtype)
    packe = plan.work("pack_out", rows * nout, x.dtype)
    return lib.bs_linear_update, (real(x), real(e), real(dw), M, nin, nout, plan.bs, plan.nnz,
                                  tb["row"], tb["col"], _held(module, packx),
                                  _held(module, packe), beta)


def _sdd_call(module, real, plan, a, b, s, alpha):
    lib, tb = module.lib, _tables(plan, module)
    N, H, Tq, d = a.shape
    work = plan.work("sdd_bt", lib.bs_threads() * d * plan.bs, a.dtype)
    return lib.bs_sdd, (real(a), real(b), real(s), N, H, Tq, b.shape[2], d, plan.bs, plan.nnz,
                        tb["head"], tb["row"], tb["col"], alpha, _held(module, work))


def _dsd_call(module, real, plan, p, b, o, transposed, beta):
    lib, tb = module.lib, _tables(plan, module)
    walk = ("col_ptr", "col_k", "col_other") if transposed else \
        ("row_ptr", "row_k", "row_other")
    N, H, Tin, d = b.shape
    work = plan.work("dsd_pt", lib.bs_threads() * plan.bs * plan.bs, p.dtype)
    return lib.bs_dsd, (real(p), real(b), real(o), N, H, Tin, o.shape[2], d, plan.bs, plan.nnz,
                        *(tb[n] for n in walk), int(bool(transposed)), beta,
                        _held(module, work))


def _softmax_call(module, real, plan, s, p, scale, causal):
    lib, tb = module.lib, _tables(plan, module)
    return lib.bs_softmax, (real(s), real(p), s.shape[0], plan.heads * plan.rows, plan.rows,
                            plan.cols, plan.bs, plan.nnz, tb["row_ptr"], tb["row"], tb["col"],
                            scale, int(bool(causal)))


def _softmax_bprop_call(module, real, plan, p, dp, ds, scale):
    lib, tb = module.lib, _tables(plan, module)
    return lib.bs_softmax_bprop, (real(p), real(dp), real(ds), p.shape[0],
                                  plan.heads * plan.rows, plan.bs, plan.nnz, tb["row_ptr"],
                                  scale)


#: op name -> its C call, ``call(module, real, plan, *arrays, *scalars)`` -> (C function,
#: arguments), ``real`` giving an operand array's pointer (``PLAN_CALLS``;
#: ``KernelModules.run_plan_op``)
CALLS = {"blocksparse_fprop": _fprop_call, "blocksparse_bprop": _bprop_call,
         "blocksparse_update": _update_call, "blocksparse_sdd": _sdd_call,
         "blocksparse_dsd": _dsd_call, "blocksparse_softmax": _softmax_call,
         "blocksparse_softmax_bprop": _softmax_bprop_call}
