"""The CPU backend's local response normalization: the C kernels of ``kernels/cpu/lrn.c`` for
contiguous float32/float64 rows, the numpy reference (``numpy_lrn``) otherwise."""
from ..operand_shapes import check_rows_alike
from ..reference import lrn as numpy_lrn


class CPULRNMixin:
    """``Backend.lrn_fprop`` / ``lrn_bprop`` for the CPU backend (mixed into ``CPUBackend``)."""

    def _lrn_kernel(self, name, tensors, *args):
        arrays = [t._ary for t in tensors]
        module = self.kernels._usable("lrn", *arrays)
        if module is None:
            getattr(numpy_lrn, name)(*arrays, *args)
            return
        ffi = module.ffi
        M, C = arrays[0].shape
        getattr(module.lib, name)(*[ffi.from_buffer("real[]", a) for a in arrays], M, C,
                                  int(args[0]), *[float(a) for a in args[1:]])

    def lrn_fprop(self, x, y, scale, depth, alpha, beta, k):
        check_rows_alike("lrn_fprop", 2, x=x, y=y, scale=scale)
        self._lrn_kernel("lrn_fprop", (x, y, scale), depth, alpha, beta, k)

    def lrn_bprop(self, x, scale, dy, dx, depth, alpha, beta):
        check_rows_alike("lrn_bprop", 2, x=x, scale=scale, dy=dy, dx=dx)
        self._lrn_kernel("lrn_bprop", (x, scale, dy, dx), depth, alpha, beta)
