"""The CPU backend's bfloat16 methods (:class:`CPUBf16Ops`, a base of ``CPUBackend``): casts
between float32 and bf16 bit patterns, and products on bf16-stored operands by the path this
machine pays for (``bf16_choice.py``: measured per op class, or ``NEONLITE_BF16``).

bf16 arrays are numpy ``uint16`` bit patterns (``bf16_kernels.py``).  These methods take numpy
arrays or the backend's tensors (their arrays are used).
"""
import os

import numpy as np

from ...kernels.cpu_features import FEATURES_OFF
from ..operand_shapes import check_permute, check_table_rows
from . import bf16_choice
from .blas import CPUBlasOps
from .rows import ROW_COMBINATION, row_combination_bf16_kernel, \
    scatter_add_rows_bf16_kernel
from .bf16_boundary import NOT_TAKEN, is_bf16_tensor
from .bf16_packed import gemm_storage_packed, packed_storage_module, prepare_storage_packed, \
    shared_area
from .bf16_kernels import BF16, F32, check_gemm_operands, from_bf16, gemm_bf16, gemm_module, \
    fused_storage_module, gemm_storage, gemm_storage_fused, gemm_variant, to_bf16


def _array(x):
    return getattr(x, "_ary", x)


def _storage_key(a, b, c, transA, transB):
    """The key of a kept packed storage product (``CPUBf16Ops.kept_compound_dot``)."""
    return ("bf16 packed", id(a), id(b), id(c), transA, transB)


def _unit_rows(ary):
    """True for a 2-D array whose rows are unit-stride and apart (``dot_bf16`` takes it)."""
    return ary.ndim == 2 and ary.strides[1] == ary.itemsize and (
        ary.shape[0] == 1 or ary.strides[0] >= ary.shape[1] * ary.itemsize)


class CPUBf16Ops:
    """bf16 on the CPU backend (see the module docstring); uses ``self.kernels`` (a
    :class:`~neonlite.backends.cpu.build.KernelModules`) and ``self._gemm_scratch``."""

    def bf16_choice(self):
        """This machine's :class:`~.bf16_choice.Bf16Choice` (measured on first use, then read
        from the kernel cache), made once per backend for each setting of ``NEONLITE_BF16``
        and ``NEONLITE_CPU_FEATURES_OFF``.  The products kept for later steps
        (:meth:`kept_compound_dot`) run while the choice they were made under is the one this
        method gave last: the variables are read again whenever a product is prepared or a
        path asked for, not at every kept product."""
        made = self.__dict__.setdefault("_bf16_choices", {})
        key = (os.environ.get(bf16_choice.ENV), os.environ.get(FEATURES_OFF))
        found = made.get(key)
        if found is None:
            bf16_choice.requested()  # a bad value is one ValueError, every time
            found = made[key] = bf16_choice.choose(self.kernels)
        self.__dict__["_bf16_latest"] = found
        return found

    def bf16_path(self, op_class="gemm"):
        """``compute``, ``storage`` or ``off``: the path op class ``op_class`` takes on
        bf16-stored data here."""
        paths = self.bf16_choice().paths
        if op_class not in paths:
            raise ValueError(f"bf16_path: unknown op class {op_class!r}; the op table's are "
                             f"{', '.join(paths)}")
        return paths[op_class]

    def bf16_product_variant(self):
        """The kernel variant a product of bf16 tensors runs here, as the profiler names it:
        the bf16 GEMM's on the compute path; on the storage path
        :func:`~.bf16_choice.storage_variant`'s (``gemm_storage``, ``gemm_packed``), or None
        where the operands are widened for the float32 GEMM.  A one-row product (a bias
        gradient) runs ``row_combination_bf16`` on either path."""
        if self.bf16_path("gemm") == "compute":
            return gemm_variant()[0]
        return bf16_choice.storage_variant(self.kernels)

    def bf16_conv_compute(self):
        """``(conv_compute module, bf16 GEMM module)`` where convolutions take the compute path
        here (``conv_bf16.py``), else None."""
        return self._bf16_compute_kernels("conv", "conv_compute")

    def bf16_attention_compute(self):
        """``(attention_compute module, bf16 GEMM module)`` where the fused attention takes the
        compute path here (``attention.py``), else None."""
        return self._bf16_compute_kernels("attention", "attention_compute")

    def _bf16_compute_kernels(self, op_class, variant):
        """``(module of kernel ``variant``, bf16 GEMM module)`` where ``op_class`` takes the
        compute path here and both load, else None."""
        if self.bf16_path(op_class) != "compute":
            return None
        gemm, _ = gemm_module(self.kernels)
        module = self.kernels.variant(variant)
        return None if gemm is None or module is None else (module, gemm)

    def to_bf16(self, x, out=None):
        """float32 ``x`` -> bf16 bit patterns (uint16), rounded to nearest even."""
        return to_bf16(self.kernels, _array(x), None if out is None else _array(out))

    def from_bf16(self, x, out=None):
        """bf16 bit patterns ``x`` -> float32 (exact)."""
        return from_bf16(self.kernels, _array(x), None if out is None else _array(out))

    def dot_bf16(self, A, B, C, alpha=1.0, beta=0.0, transA=False, transB=False, path=None,
                 threads=0, bits=None):
        """C (float32) = alpha * op(A) @ op(B) + beta * C with A and B bf16 bit patterns
        (2-D uint16, unit-stride rows; op() transposes where asked): the forward product
        (X @ W), the input gradient (dY @ W^T: ``transB``) and the weight gradient
        (X^T @ dY: ``transA``) of a Linear layer on bf16 activations and weights.

        ``path`` (default: this machine's for ``gemm``) is ``compute`` (bf16 arithmetic,
        float32 accumulation) or ``storage`` (float32 arithmetic: the fused storage GEMM where
        the storage path runs it, else widened operands and the float32 GEMM); ``off`` is
        refused.
        ``threads``: OpenMP threads of the bf16 kernels (0: their default).
        ``bits``: a bf16 array of C's shape with unit-stride rows that also receives C rounded
        to nearest even: by the GEMM's epilogue, or by one narrowing pass after the float32
        GEMM where the storage path has no fused GEMM."""
        a, b, c = _array(A), _array(B), _array(C)
        check_gemm_operands(a, b, c, transA, transB)
        if bits is not None:
            bits = _array(bits)
            if bits.shape != c.shape or bits.dtype != BF16 or not _unit_rows(bits):
                raise ValueError(f"dot_bf16: bits must be a bf16 (uint16) array of C's shape "
                                 f"{c.shape} with unit-stride rows, got "
                                 f"{getattr(bits, 'dtype', '?')} of shape {bits.shape}")
        path = self.bf16_path("gemm") if path is None else path
        if path == "compute":
            module, why = gemm_module(self.kernels)
            if module is None:
                raise ValueError(f"dot_bf16: the compute path cannot run here: {why}")
            return gemm_bf16(module, a, b, c, alpha, beta, transA, transB, threads, bits,
                             shared_area(self.kernels, "work"))
        if path == "storage":
            module = self.storage_gemm()
            if module is not None:
                return gemm_storage_fused(module, a, b, c, bits, alpha, beta, transA, transB,
                                          threads, shared_area(self.kernels, "work"))
            packed = self.storage_packed_gemm()
            if packed is not None and a.dtype == BF16 and b.dtype == BF16:
                gemm_storage_packed(self.kernels, packed, a, b, c, None, alpha, beta, transA,
                                    transB)
            else:
                gemm_storage(self.kernels, a, b, c, alpha, beta, transA, transB,
                             self._gemm_scratch)
            if bits is not None:
                self.bf16_boundary.narrow(c, bits, ("dot_bf16", "bits"))
            return c
        raise ValueError(f"dot_bf16: path {path!r}: bf16 is off here "
                         f"({bf16_choice.ENV}=off)" if path == "off" else
                         f"dot_bf16: path must be compute or storage, got {path!r}")

    def storage_gemm(self):
        """The storage path's fused GEMM module where the storage path runs it here
        (``fused_storage_module``: AVX-512, and a float32 GEMM that is not MKL's), or None;
        found once per backend for each ``NEONLITE_CPU_FEATURES_OFF``."""
        made = self.__dict__.setdefault("_storage_gemms", {})
        key = os.environ.get(FEATURES_OFF)
        if key not in made:
            made[key] = fused_storage_module(self.kernels)
        return made[key]

    def storage_packed_gemm(self):
        """The storage path's GEMM on MKL's packed GEMM (``packed_storage_module``: the float32
        GEMM is MKL's) where the fused GEMM does not run, or None."""
        made = self.__dict__.setdefault("_storage_packed_gemms", {})
        key = os.environ.get(FEATURES_OFF)
        if key not in made:
            made[key] = None if self.storage_gemm() is not None else \
                packed_storage_module(self.kernels)
        return made[key]

    def fused_compound_dot(self, arguments):
        """``compound_dot`` on bf16 A and B (2-D, unit-stride rows), the product accumulated in
        float32 (else ``NOT_TAKEN``: the boundary's general path runs).  Storage path:
        :meth:`_storage_compound_dot`.  Compute path: :meth:`dot_bf16`, straight into a
        float32 C, or into the boundary's float32 work tensor of a bf16 C (widened first where
        beta != 0) and narrowed into C by the GEMM's epilogue (``bits``).  Returns C."""
        A, B, C = arguments["A"], arguments["B"], arguments["C"]
        if not (is_bf16_tensor(A) and is_bf16_tensor(B)) or not hasattr(C, "_ary"):
            return NOT_TAKEN
        if self._bf16_row_product(A, B, C, arguments):
            return C
        a, b, c = A._ary, B._ary, C._ary
        if not (_unit_rows(a) and _unit_rows(b) and _unit_rows(c)):
            return NOT_TAKEN
        if not C.bf16 and c.dtype != F32:
            return NOT_TAKEN
        transA, transB, beta = arguments["transA"], arguments["transB"], arguments["beta"]
        if self.bf16_path("gemm") == "storage":
            return self._storage_compound_dot(A, B, C, arguments["alpha"], beta, transA, transB)
        if not C.bf16:
            self.dot_bf16(a, b, c, arguments["alpha"], beta, transA, transB)
            return C
        boundary = self.bf16_boundary
        work = boundary.work_tensor(("compound_dot", "C"), c.shape)._ary
        if beta != 0.0:
            boundary.widen(c, work)
        self.dot_bf16(a, b, work, arguments["alpha"], beta, transA, transB, bits=c)
        return C

    def kept_compound_dot(self, arguments):
        """``compound_dot`` by a call kept for these tensors' arrays (kept tensors, as
        ``compound_dot`` keeps float32 MKL calls): the packed storage product
        :meth:`_storage_compound_dot` kept while the bf16 choice it was made under is still the
        one :meth:`bf16_choice` last gave, or the one-row product of :meth:`_bf16_row_product`
        (the same on either path); C, else ``NOT_TAKEN``.  The boundary tries it before the
        row's check, which passed when the call was kept."""
        C = arguments["C"]
        try:
            a, b, c = arguments["A"]._ary, arguments["B"]._ary, C._ary
        except AttributeError:
            return NOT_TAKEN
        transA, transB = arguments["transA"], arguments["transB"]
        if a.shape[0] == 1 and not (transA or transB) and self.kernels.run_kept(
                ROW_COMBINATION, (a, b, c), (float(arguments["alpha"]), float(arguments["beta"]))):
            return C
        kept = self._gemm_calls.find(_storage_key(a, b, c, transA, transB), (a, b, c))
        if kept is None or kept[0] is not self.__dict__.get("_bf16_latest"):
            return NOT_TAKEN
        kept[1](arguments["alpha"], arguments["beta"])
        return C

    def _storage_compound_dot(self, A, B, C, alpha, beta, transA, transB):
        """The storage path of :meth:`fused_compound_dot`: the fused GEMM where it runs (a bf16
        C straight from its epilogue, through the boundary's float32 work tensor only where k
        is more than one of its blocks); where the float32 GEMM is MKL's, MKL's packed GEMM on
        operands widened and a result narrowed a cache-sized piece at a time
        (``prepare_storage_packed``, the call kept where A, B and C are kept tensors and C
        shares no memory with A or B); elsewhere A and B widened into the boundary's work
        tensors and the backend's float32 ``compound_dot`` on them, C narrowed.  Returns C."""
        boundary = self.bf16_boundary
        module = self.storage_gemm()
        if module is not None:
            k = A.shape[0] if transA else A.shape[1]
            work = None
            if not C.bf16:
                work = C._ary
            elif k > module.lib.nl_gemm_storage_kc():
                work = boundary.work_tensor(("compound_dot", "C"), C.shape)._ary
                if beta != 0.0:
                    boundary.widen(C._ary, work)
            gemm_storage_fused(module, A._ary, B._ary, work, C._ary if C.bf16 else None,
                               alpha, beta, transA, transB, area=shared_area(self.kernels, "work"))
            return C
        packed = self.storage_packed_gemm()
        a, b, c = A._ary, B._ary, C._ary
        if packed is not None and not (np.may_share_memory(c, a) or np.may_share_memory(c, b)):
            run = prepare_storage_packed(self.kernels, packed, a, b, None if C.bf16 else c,
                                         c if C.bf16 else None, transA, transB)
            if A.kept and B.kept and C.kept:
                self._gemm_calls.keep(_storage_key(a, b, c, transA, transB), (a, b, c),
                                      (self.bf16_choice(), run))
            run(alpha, beta)
            return C
        wide = []
        for name, t in (("A", A), ("B", B)):
            work = boundary.work_tensor(("compound_dot", name), t.shape)
            boundary.widen(t._ary, work._ary)
            wide.append(work)
        out = C
        if C.bf16:
            out = boundary.work_tensor(("compound_dot", "C"), C.shape)
            if beta != 0.0:
                boundary.widen(C._ary, out._ary)
        CPUBlasOps.compound_dot(self, wide[0], wide[1], out, alpha, beta, transA, transB)
        if C.bf16:
            boundary.narrow(out._ary, C._ary, ("compound_dot", "C"))
        return C

    def fused_take_rows(self, arguments):
        """``take_rows`` of a bf16 table into a bf16 ``out`` (both contiguous): the rows' bits
        gathered as they are (exact: no widening of the whole table); ids stored in bf16 are
        checked first (``check_table_rows``: a table no longer than bf16 numbers ids
        exactly) and widened (:meth:`_bf16_row_ids`)."""
        table, ids, out = arguments["table"], arguments["ids"], arguments["out"]
        check_table_rows("take_rows", ("table", table), ids, ("out", out))
        if not (is_bf16_tensor(table) and is_bf16_tensor(out)):
            return NOT_TAKEN
        rows, found = table._ary, out._ary
        if not (rows.flags.c_contiguous and found.flags.c_contiguous):
            return NOT_TAKEN
        idx = self._bf16_row_ids("take_rows", ids, rows.shape[0])
        np.take(rows, idx, axis=0, out=found.reshape(idx.size, rows.shape[1]), mode="clip")
        return None

    def fused_scatter_add_rows(self, arguments):
        """``scatter_add_rows``: the ids checked on the operands as given (bf16 ids refused
        where the table is longer than bf16 numbers ids exactly); into a bf16 table from bf16
        rows by ``scatter_add_rows_bf16`` (float32 sums per id, each table row rounded once,
        the table not widened), else the boundary's general path."""
        grad_table, ids, rows = (arguments[n] for n in ("grad_table", "ids", "rows"))
        check_table_rows("scatter_add_rows", ("grad_table", grad_table), ids, ("rows", rows))
        if not (is_bf16_tensor(grad_table) and is_bf16_tensor(rows)):
            return NOT_TAKEN
        idx = self._bf16_row_ids("scatter_add_rows", ids, grad_table.shape[0])
        if not scatter_add_rows_bf16_kernel(self.kernels, grad_table._ary, idx, rows._ary):
            return NOT_TAKEN
        return None

    def _bf16_row_ids(self, op_name, ids, nrows):
        """The checked int64 row numbers of ``ids`` (``_row_indices``), bf16 ones widened
        first (exactly, into the boundary's work tensor: O(ids))."""
        if not is_bf16_tensor(ids):
            return self._row_indices(ids._ary, nrows)
        work = self.bf16_boundary.work_tensor((op_name, "ids"), ids.shape)._ary
        self.bf16_boundary.widen(ids._ary, work)
        return self._row_indices(work, nrows)

    def _bf16_row_product(self, A, B, C, arguments):
        """``compound_dot`` of one row of bf16 A (1, M) by bf16 B (M, K) into bf16 C, not
        transposed (a bias gradient ones @ dY): the weighted sum of B's rows, one pass over its
        bits (``row_combination_bf16_kernel``) on either path, the operands checked by the
        boundary (the row's check); False where it does not take it."""
        if arguments["transA"] or arguments["transB"] or A.shape[0] != 1 or \
                not is_bf16_tensor(C):
            return False
        return row_combination_bf16_kernel(self.kernels, A._ary, B._ary, C._ary,
                                           arguments["alpha"], arguments["beta"],
                                           keep=A.kept and B.kept and C.kept)

    def fused_permute_axes(self, arguments):
        """``permute_axes`` from bf16 to bf16: the bits moved as they are (exact)."""
        x, out, axes = arguments["x"], arguments["out"], arguments["axes"]
        if not (is_bf16_tensor(x) and is_bf16_tensor(out)):
            return NOT_TAKEN
        check_permute(x, out, axes)
        np.copyto(out._ary, np.transpose(x._ary, tuple(int(a) for a in axes)))
        return None
