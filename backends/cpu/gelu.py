"""GELU fused with a bias on the CPU (``Backend.gelu``, ``gelu_bprop``): the calls of
``kernels/cpu/gelu.c`` (:class:`GeluKernels`) and the backend's ops (:class:`CPUGeluOps`), which
run the contract's op-tree definition where the kernels do not take the case."""
from ..operand_sizes import check_operand_sizes
from .build import pointer
from .tensor import all_kept


class GeluKernels:
    """The GELU calls of :class:`~neonlite.backends.cpu.kernels.CPUKernels` (True when done)."""

    def gelu(self, x, out, bias, pre, approximate, keep=False):
        """pre = x + bias (bias (D,) or None; pre may be x, or None with a bias: the sum is not
        kept), out = gelu(pre) over rows (M, D).  ``keep``: see ``run_call``."""
        arrays = (x, out, bias, pre)
        return self.run_call("gelu", arrays, approximate, keep,
                             lambda: self._gelu_call(*arrays, approximate))

    def _gelu_call(self, x, out, bias, pre, approximate):
        check_operand_sizes("gelu", x, x.shape[-1] if x.ndim else 1,
                            whole=(("out", out), ("pre", pre)), columns=(("bias", bias),))
        arrays = (x, out) + tuple(a for a in (bias, pre) if a is not None)
        if x.ndim == 0 or x.shape != out.shape or (
                bias is not None and pre is not None and pre.shape != x.shape):
            return None
        module = self.usable("gelu", *arrays)
        if module is None:
            return None
        ffi = module.ffi
        pre = x if pre is None and bias is None else pre
        D = x.shape[-1]
        return module.lib.gelu_fprop, (
            pointer(ffi, x), pointer(ffi, bias), pointer(ffi, pre), pointer(ffi, out),
            x.size // max(D, 1), D, approximate == "tanh")

    def gelu_bprop(self, x, dy, dx, dbias, approximate, y=None, keep=False):
        """dx = dy * gelu'(x) over rows (M, D); dbias (D,) += its column sums unless None;
        y = gelu(x) or None (see ``gelu_bprop`` in gelu.h).  The sums' work array is kept in
        ``workspaces`` (:meth:`block_sums_work`), so repeated calls allocate nothing.
        ``keep``: see ``run_call``."""
        arrays = (x, dy, dx, dbias, y)
        return self.run_call("gelu_bprop", arrays, approximate, keep,
                             lambda: self._gelu_bprop_call(*arrays, approximate))

    def _gelu_bprop_call(self, x, dy, dx, dbias, y, approximate):
        check_operand_sizes("gelu_bprop", x, x.shape[-1] if x.ndim else 1,
                            whole=(("dy", dy), ("dx", dx), ("y", y)), columns=(("dbias", dbias),))
        arrays = (x, dy, dx) + tuple(a for a in (dbias, y) if a is not None)
        if x.ndim == 0 or not x.shape == dy.shape == dx.shape or (
                y is not None and y.shape != x.shape):
            return None
        module = self.usable("gelu", *arrays)
        if module is None:
            return None
        ffi = module.ffi
        D = x.shape[-1]
        M = x.size // max(D, 1)
        work = ffi.NULL if dbias is None else ffi.from_buffer(
            "double[]", self.block_sums_work(module, "gelu_bprop", x.dtype, M, D))
        return module.lib.gelu_bprop, (
            pointer(ffi, x), pointer(ffi, y), pointer(ffi, dy), pointer(ffi, dx),
            pointer(ffi, dbias), work, M, D, approximate == "tanh")


class CPUGeluOps:
    """The GELU ops of the CPU backend."""

    def gelu(self, x, out, bias=None, pre=None, approximate="none"):
        if self.kernels.gelu(x._ary, out._ary, None if bias is None else bias._ary,
                             None if pre is None else pre._ary, approximate,
                             keep=all_kept((x, out, bias, pre))):
            return out
        return super().gelu(x, out, bias, pre, approximate)

    def gelu_bprop(self, x, dy, dx, dbias=None, approximate="none", y=None):
        if self.kernels.gelu_bprop(x._ary, dy._ary, dx._ary,
                                   None if dbias is None else dbias._ary, approximate,
                                   None if y is None else y._ary,
                                   keep=all_kept((x, dy, dx, dbias, y))):
            return dx
        return super().gelu_bprop(x, dy, dx, dbias, approximate)
