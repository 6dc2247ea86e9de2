"""The CPU backend's block-sparse ops: C kernels (``kernels/cpu/blocksparse.c``, OpenMP over
output blocks, register-tiled products per block) for contiguous float32/float64 arrays, and
the numpy reference (``neonlite.backends.reference.blocksparse``, walking the same tables) for
every other case.  The tables and the kernels' pack buffers live on the plan
(:class:`CPUBlockSparsePlan`), made on first use."""
import numpy as np

from ..blocksparse_plan import BlockSparsePlan
from ..operand_shapes import check_blocksparse
from ..reference import blocksparse as reference

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


def _ary(t):
    return t._ary


class CPUBlockSparseOps:
    """``Backend.blocksparse_*`` for the CPU backend (mixed into ``CPUBackend``; uses its
    ``kernels``)."""

    # ---- helpers -------------------------------------------------------------------------------
    def _bs_module(self, *arrays):
        return self.kernels.usable("blocksparse", *arrays)

    def blocksparse_layer(self, layout, block_size):
        return CPUBlockSparsePlan(layout, block_size)

    @staticmethod
    def _bs_tables(plan, module):
        if not isinstance(plan, CPUBlockSparsePlan):
            raise TypeError(f"a CPU block-sparse op needs the plan of this backend's "
                            f"blocksparse_layer, got {type(plan).__name__}")
        return plan.table_pointers(module)

    @staticmethod
    def _bs_scratch(plan, name, size, dtype):
        return plan.work(name, size, dtype)

    @staticmethod
    def _real(module, a):
        return module.ffi.cast("real *", module.ffi.from_buffer(a))

    # ---- block-sparse weights -----------------------------------------------------------------
    def blocksparse_fprop(self, plan, x, w, y):
        check_blocksparse("blocksparse_fprop", plan, x=x, w=w, y=y)
        x, w, y = _ary(x), _ary(w), _ary(y)
        module = self._bs_module(x, w, y)
        if module is None:
            y[...] = reference.linear_fprop(plan.tables, x, w, plan.bs)
            return y
        tb, lib = self._bs_tables(plan, module), module.lib
        M, nin = x.shape
        pack = self._bs_scratch(plan, "task_in", lib.bs_threads() * lib.bs_task_rows() * nin,
                                x.dtype)
        lib.bs_linear_fprop(self._real(module, x), self._real(module, w), self._real(module, y),
                            M, nin, y.shape[1], plan.bs, tb["col_ptr"], tb["col_k"],
                            tb["col_other"], self._real(module, pack))
        return y

    def blocksparse_bprop(self, plan, e, w, dx, beta=0.0):
        check_blocksparse("blocksparse_bprop", plan, e=e, w=w, dx=dx)
        e, w, dx = _ary(e), _ary(w), _ary(dx)
        module = self._bs_module(e, w, dx)
        if module is None:
            dx[...] = reference.linear_bprop(plan.tables, e, w, plan.bs) + \
                (beta * dx if beta else 0)
            return dx
        tb, lib = self._bs_tables(plan, module), module.lib
        M, nout = e.shape
        pack = self._bs_scratch(plan, "task_out",
                                lib.bs_threads() * lib.bs_task_rows() * nout, e.dtype)
        wt = self._bs_scratch(plan, "wt", w.size, w.dtype)
        lib.bs_linear_bprop(self._real(module, e), self._real(module, w), self._real(module, dx),
                            M, dx.shape[1], nout, plan.bs, plan.nnz, tb["row_ptr"], tb["row_k"],
                            tb["row_other"], self._real(module, pack), self._real(module, wt),
                            beta)
        return dx

    def blocksparse_update(self, plan, x, e, dw, beta=0.0):
        check_blocksparse("blocksparse_update", plan, x=x, e=e, dw=dw)
        x, e, dw = _ary(x), _ary(e), _ary(dw)
        module = self._bs_module(x, e, dw)
        if module is None:
            dw[...] = reference.linear_update(plan.tables, x, e, plan.bs) + \
                (beta * dw if beta else 0)
            return dw
        tb, lib = self._bs_tables(plan, module), module.lib
        M, nin = x.shape
        nout = e.shape[1]
        rows = lib.bs_chunk_rows()
        packx = self._bs_scratch(plan, "pack_in", rows * nin, x.dtype)
        packe = self._bs_scratch(plan, "pack_out", rows * nout, x.dtype)
        lib.bs_linear_update(self._real(module, x), self._real(module, e),
                             self._real(module, dw), M, nin, nout, plan.bs, plan.nnz, tb["row"],
                             tb["col"], self._real(module, packx), self._real(module, packe),
                             beta)
        return dw

    # ---- block-sparse attention ---------------------------------------------------------------
    def blocksparse_sdd(self, plan, a, b, s, alpha=1.0):
        check_blocksparse("blocksparse_sdd", plan, a=a, b=b, s=s)
        a, b, s = _ary(a), _ary(b), _ary(s)
        module = self._bs_module(a, b, s)
        if module is None:
            s[...] = reference.sdd(plan.tables, a, b, plan.bs, alpha)
            return s
        tb, lib = self._bs_tables(plan, module), module.lib
        N, H, Tq, d = a.shape
        work = self._bs_scratch(plan, "sdd_bt", lib.bs_threads() * d * plan.bs, a.dtype)
        lib.bs_sdd(self._real(module, a), self._real(module, b), self._real(module, s), N, H, Tq,
                   b.shape[2], d, plan.bs, plan.nnz, tb["head"], tb["row"], tb["col"], alpha,
                   self._real(module, work))
        return s

    def blocksparse_dsd(self, plan, p, b, o, transposed=False, beta=0.0):
        check_blocksparse("blocksparse_dsd", plan, transposed, p=p, b=b, o=o)
        p, b, o = _ary(p), _ary(b), _ary(o)
        module = self._bs_module(p, b, o)
        if module is None:
            op = reference.dsd_t if transposed else reference.dsd
            o[...] = op(plan.tables, p, b, plan.bs) + (beta * o if beta else 0)
            return o
        tb = self._bs_tables(plan, module)
        walk = ("col_ptr", "col_k", "col_other") if transposed else \
            ("row_ptr", "row_k", "row_other")
        N, H, Tin, d = b.shape
        lib = module.lib
        work = self._bs_scratch(plan, "dsd_pt", lib.bs_threads() * plan.bs * plan.bs, p.dtype)
        lib.bs_dsd(self._real(module, p), self._real(module, b), self._real(module, o), N, H, Tin,
                   o.shape[2], d, plan.bs, plan.nnz, *(tb[n] for n in walk),
                   int(bool(transposed)), beta, self._real(module, work))
        return o

    def blocksparse_softmax(self, plan, s, p, scale=1.0, causal=False):
        check_blocksparse("blocksparse_softmax", plan, s=s, p=p)
        s, p = _ary(s), _ary(p)
        module = self._bs_module(s, p)
        if module is None:
            p[...] = reference.softmax(plan.tables, s, plan.bs, scale, causal)
            return p
        tb = self._bs_tables(plan, module)
        module.lib.bs_softmax(self._real(module, s), self._real(module, p), s.shape[0],
                              plan.heads * plan.rows, plan.rows, plan.cols, plan.bs, plan.nnz,
                              tb["row_ptr"], tb["row"], tb["col"], scale, int(bool(causal)))
        return p

    def blocksparse_softmax_bprop(self, plan, p, dp, ds, scale=1.0):
        check_blocksparse("blocksparse_softmax_bprop", plan, p=p, dp=dp, ds=ds)
        p, dp, ds = _ary(p), _ary(dp), _ary(ds)
        module = self._bs_module(p, dp, ds)
        if module is None:
            ds[...] = reference.softmax_bprop(plan.tables, p, dp, scale)
            return ds
        tb = self._bs_tables(plan, module)
        module.lib.bs_softmax_bprop(self._real(module, p), self._real(module, dp),
                                    self._real(module, ds), p.shape[0], plan.heads * plan.rows,
                                    plan.bs, plan.nnz, tb["row_ptr"], scale)
        return ds
