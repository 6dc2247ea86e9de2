"""GELU on the GPU (``Backend.gelu``, ``gelu_bprop``): the contract's op-trees (compiled into
fused kernels by the op-tree code generator), after the operand checks the CPU kernels make
(``check_operand_sizes``), so a misshaped bias or output is one error naming the op; with a
bias gradient, dx and dbias must be contiguous (its column sums read dx as rows)."""
from ..operand_sizes import check_contiguous, check_operand_sizes


class GPUGeluOps:
    """``gelu`` / ``gelu_bprop`` of :class:`~neonlite.backends.gpu.backend.GPUBackend`."""

    def gelu(self, x, out, bias=None, pre=None, approximate="none"):
        check_operand_sizes("gelu", x, x.shape[-1] if len(x.shape) else 1,
                            whole=(("out", out), ("pre", pre)), columns=(("bias", bias),))
        return super().gelu(x, out, bias, pre, approximate)

    def gelu_bprop(self, x, dy, dx, dbias=None, approximate="none", y=None):
        check_operand_sizes("gelu_bprop", x, x.shape[-1] if len(x.shape) else 1,
                            whole=(("dy", dy), ("dx", dx), ("y", y)), columns=(("dbias", dbias),))
        if dbias is not None:
            check_contiguous("gelu_bprop", dx=dx, dbias=dbias)
        return super().gelu_bprop(x, dy, dx, dbias, approximate, y)
