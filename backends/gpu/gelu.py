"""GELU on the GPU (``Backend.gelu``, ``gelu_bprop``; the rows in ``ops/elementwise.py``): the
op-trees of ``shared/gelu.py``, which the op-tree code generator fuses into kernels, after the
row's operand check (``Op.check_operands``: a misshaped bias or output is one error naming the
op); with a bias gradient, dx and dbias must be contiguous (its column sums read dx as
rows)."""
from ..operand_sizes import check_contiguous
from ..ops import OPS
from ..shared import gelu


class GPUGeluOps:
    """``gelu`` / ``gelu_bprop`` of :class:`~neonlite.backends.gpu.backend.GPUBackend`."""

    def gelu(self, x, out, bias=None, pre=None, approximate="none"):
        OPS["gelu"].check_operands((x, out, bias, pre), (approximate,))
        if bias is not None:
            pre = out if pre is None else pre
            pre[:] = x + bias
            x = pre
        elif pre is not None and pre is not x:
            pre[:] = x
        gelu.fprop(self, x, out, approximate)
        return out

    def gelu_bprop(self, x, dy, dx, dbias=None, approximate="none", y=None):
        OPS["gelu_bprop"].check_operands((x, dy, dx, dbias, y), (approximate,))
        if dbias is not None:
            check_contiguous("gelu_bprop", dx=dx, dbias=dbias)
        gelu.bprop(self, x, dy, dx, approximate)
        if dbias is not None:
            D = dbias.shape[-1]
            rows = dx.reshape(dx.size // D, D)
            acc = dbias.reshape(1, D)
            acc[:] = acc + self.sum(rows, axis=0)
        return dx
