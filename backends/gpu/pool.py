"""Max and average pooling on the GPU (``Backend.fprop_pool``, ``bprop_pool``): the kernels
of ``kernels/cuda/pool.cu``; max pooling keeps its argmax (int32, the output's shape) in a
scratch tensor of the backend, per plan."""
import numpy as np

from ..operand_shapes import check_pool
from .dense import on_dense


def _dims(plan):
    return [int(getattr(plan, n)) for n in ("N", "H", "W", "C", "P", "Q", "R", "S", "pad_h",
                                            "pad_w", "str_h", "str_w")]


class GPUPoolOps:
    """The pooling passes of :class:`~neonlite.backends.gpu.backend.GPUBackend` (strided views
    go through contiguous copies: ``dense.on_dense``)."""

    def fprop_pool(self, plan, I, O):
        check_pool("fprop_pool", plan, I=I, O=O)
        on_dense(self, "fprop_pool", lambda I, O: self._fprop_pool(plan, I, O), O, I)

    def bprop_pool(self, plan, E, grad_I, beta=0.0):
        check_pool("bprop_pool", plan, E=E, grad_I=grad_I)
        on_dense(self, "bprop_pool", lambda E, grad_I: self._bprop_pool(plan, E, grad_I, beta),
                       grad_I, E)

    def _fprop_pool(self, plan, I, O):
        argmax = self.scratch(("argmax", id(plan)), O.shape, np.int32)
        func = self.kernel("pool", f"nl_pool_fprop_{I.storage}", "PPP" + "i" * 13)
        self.device.launch(func, (self.device.blocks(O.size), 1), (256, 1, 1),
                           [O.ptr, I.ptr, argmax.ptr] + _dims(plan)
                           + [int(plan.op == "max")])

    def _bprop_pool(self, plan, E, grad_I, beta):
        argmax = self.scratch(("argmax", id(plan)), E.shape, np.int32)
        func = self.kernel("pool", f"nl_pool_bprop_{E.storage}", "PPP" + "i" * 13 + "f")
        self.device.launch(func, (self.device.blocks(grad_I.size), 1), (256, 1, 1),
                           [grad_I.ptr, E.ptr, argmax.ptr] + _dims(plan)
                           + [int(plan.op == "max"), np.float32(beta)])
