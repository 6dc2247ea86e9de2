"""The GPU backend's local response normalization (``kernels/cuda/lrn.cu``): one grid-stride
kernel per pass over rows (M, C); every tensor contiguous, one storage (checked by the ops)."""
import numpy as np

from ..operand_shapes import check_rows_alike
from ..operand_sizes import check_contiguous


class GPULRNMixin:
    """``Backend.lrn_fprop`` / ``lrn_bprop`` for :class:`~neonlite.backends.gpu.backend.GPUBackend`."""

    def _lrn_launch(self, function, tensors, depth, floats):
        storage = tensors[0].storage
        M, C = tensors[0].shape
        func = self.kernel("lrn", f"{function}_{storage}",
                           "P" * len(tensors) + "iii" + "f" * len(floats))
        self.device.launch(func, (self.device.blocks(M * C), 1), (256, 1, 1),
                           [t.ptr for t in tensors] + [int(M), int(C), int(depth)]
                           + [np.float32(f) for f in floats])

    def lrn_fprop(self, x, y, scale, depth, alpha, beta, k):
        check_rows_alike("lrn_fprop", 2, x=x, y=y, scale=scale)
        check_contiguous("lrn_fprop", x=x, y=y, scale=scale)
        self._lrn_launch("nl_lrn_fprop", (x, y, scale), depth, (alpha, beta, k))

    def lrn_bprop(self, x, scale, dy, dx, depth, alpha, beta):
        check_rows_alike("lrn_bprop", 2, x=x, scale=scale, dy=dy, dx=dx)
        check_contiguous("lrn_bprop", x=x, scale=scale, dy=dy, dx=dx)
        self._lrn_launch("nl_lrn_bprop", (x, scale, dy, dx), depth, (alpha, beta))
