"""The CPU backend's bfloat16 methods (:class:`CPUBf16Ops`, a base of ``CPUBackend``): casts
between float32 and bf16 bit patterns, and products on bf16-stored operands by the path this
machine pays for (``bf16_choice.py``: measured per op class, or ``NEONLITE_BF16``).

bf16 arrays are numpy ``uint16`` bit patterns (``bf16_kernels.py``).  These methods take numpy
arrays or the backend's tensors (their arrays are used).
"""
from ...kernels.cpu_features import forced_off
from ..ops import OPS
from . import bf16_choice
from .bf16_boundary import NOT_TAKEN, is_bf16_tensor
from .bf16_kernels import F32, check_gemm_operands, from_bf16, gemm_bf16, gemm_module, \
    gemm_storage, to_bf16

COMPOUND_DOT = OPS["compound_dot"]


def _array(x):
    return getattr(x, "_ary", x)


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
        and ``NEONLITE_CPU_FEATURES_OFF``."""
        key = (bf16_choice.requested(), tuple(sorted(forced_off())))
        made = self.__dict__.setdefault("_bf16_choices", {})
        if key not in made:
            made[key] = bf16_choice.choose(self.kernels)
        return made[key]

    def bf16_path(self, op_class="gemm"):
        """``compute``, ``storage`` or ``off``: the path op class ``op_class`` takes on
        bf16-stored data here."""
        paths = self.bf16_choice().paths
        if op_class not in paths:
            raise ValueError(f"bf16_path: unknown op class {op_class!r}; the op table's are "
                             f"{', '.join(paths)}")
        return paths[op_class]

    def to_bf16(self, x, out=None):
        """float32 ``x`` -> bf16 bit patterns (uint16), rounded to nearest even."""
        return to_bf16(self.kernels, _array(x), None if out is None else _array(out))

    def from_bf16(self, x, out=None):
        """bf16 bit patterns ``x`` -> float32 (exact)."""
        return from_bf16(self.kernels, _array(x), None if out is None else _array(out))

    def dot_bf16(self, A, B, C, alpha=1.0, beta=0.0, transA=False, transB=False, path=None,
                 threads=0):
        """C (float32) = alpha * op(A) @ op(B) + beta * C with A and B bf16 bit patterns
        (2-D uint16, unit-stride rows; op() transposes where asked): the forward product
        (X @ W), the input gradient (dY @ W^T: ``transB``) and the weight gradient
        (X^T @ dY: ``transA``) of a Linear layer on bf16 activations and weights.

        ``path`` (default: this machine's for ``gemm``) is ``compute`` (bf16 arithmetic,
        float32 accumulation) or ``storage`` (widened to float32, the float32 GEMM); ``off``
        is refused.  ``threads``: OpenMP threads of the compute path (0: its default)."""
        a, b, c = _array(A), _array(B), _array(C)
        check_gemm_operands(a, b, c, transA, transB)
        path = self.bf16_path("gemm") if path is None else path
        if path == "compute":
            module, why = gemm_module(self.kernels)
            if module is None:
                raise ValueError(f"dot_bf16: the compute path cannot run here: {why}")
            return gemm_bf16(module, a, b, c, alpha, beta, transA, transB, threads)
        if path == "storage":
            return gemm_storage(self.kernels, a, b, c, alpha, beta, transA, transB,
                                self._gemm_scratch)
        raise ValueError(f"dot_bf16: path {path!r}: bf16 is off here "
                         f"({bf16_choice.ENV}=off)" if path == "off" else
                         f"dot_bf16: path must be compute or storage, got {path!r}")

    def fused_compound_dot(self, arguments):
        """``compound_dot`` on bf16 A and B (2-D, unit-stride rows) by :meth:`dot_bf16`, the
        product accumulated in float32: straight into a float32 C, or into the boundary's
        float32 work tensor of a bf16 C (widened first where beta != 0), then narrowed; returns
        C, or ``NOT_TAKEN`` where it does not take the operands (the boundary's general path
        runs)."""
        A, B, C = arguments["A"], arguments["B"], arguments["C"]
        if not (is_bf16_tensor(A) and is_bf16_tensor(B)) or not hasattr(C, "_ary"):
            return NOT_TAKEN
        a, b, c = A._ary, B._ary, C._ary
        if not (_unit_rows(a) and _unit_rows(b) and _unit_rows(c)):
            return NOT_TAKEN
        if not C.bf16 and c.dtype != F32:
            return NOT_TAKEN
        transA, transB, beta = arguments["transA"], arguments["transB"], arguments["beta"]
        COMPOUND_DOT.check("compound_dot", A, B, C, transA, transB)
        if not C.bf16:
            self.dot_bf16(a, b, c, arguments["alpha"], beta, transA, transB)
            return C
        boundary = self.bf16_boundary
        work = boundary.work_tensor(("compound_dot", "C"), c.shape)._ary
        if beta != 0.0:
            boundary.widen(c, work)
        self.dot_bf16(a, b, work, arguments["alpha"], beta, transA, transB)
        boundary.narrow(work, c, ("compound_dot", "C"))
        return C
