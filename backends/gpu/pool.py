"""Max and average pooling on the GPU (``Backend.fprop_pool``, ``bprop_pool``): the kernels
of ``kernels/cuda/pool.cu``; max pooling keeps its argmax (int32, the output's shape) in a
scratch tensor of the backend, per plan."""
import numpy as np


def _dims(plan):
    return [int(getattr(plan, n)) for n in ("N", "H", "W", "C", "P", "Q", "R", "S", "pad_h",
                                            "pad_w", "str_h", "str_w")]


class GPUPoolOps:
    """The pooling passes of :class:`~neonlite.backends.gpu.backend.GPUBackend`."""

    def fprop_pool(self, plan, I, O):
        argmax = self.scratch(("argmax", id(plan)), O.shape, np.int32)
        func = self.kernel("pool", f"nl_pool_fprop_{I.storage}", "PPP" + "i" * 13)
        self.device.launch(func, (self.device.blocks(O.size), 1), (256, 1, 1),
                           [O.ptr, I.ptr, argmax.ptr] + _dims(plan)
                           + [int(plan.op == "max")])

    def bprop_pool(self, plan, E, grad_I, beta=0.0):
        argmax = self.scratch(("argmax", id(plan)), E.shape, np.int32)
        func = self.kernel("pool", f"nl_pool_bprop_{E.storage}", "PPP" + "i" * 13 + "f")
        self.device.launch(func, (self.device.blocks(grad_I.size), 1), (256, 1, 1),
                           [grad_I.ptr, E.ptr, argmax.ptr] + _dims(plan)
                           + [int(plan.op == "max"), np.float32(beta)])
