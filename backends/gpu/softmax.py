"""Softmax, fused softmax-cross-entropy and the masked attention softmax on the GPU
(``Backend.softmax``, ``softmax_cross_entropy``, ``masked_softmax``, ``masked_softmax_bprop``):
the kernels of ``kernels/cuda/softmax.cu``, one block per row.  Nothing is copied to the host
except the scalar loss that ``softmax_cross_entropy`` returns."""
import numpy as np

from ..operand_shapes import check_masked_softmax
from ..operand_sizes import check_contiguous, check_operand_sizes
from ..shared.bfloat16 import holds_integers
from ..shared.class_indices import check_class_indices
from ..ops import OPS
from .dense import rows_of
from .norm import row_grid


class GPUSoftmaxOps:
    """The softmax ops of :class:`~neonlite.backends.gpu.backend.GPUBackend`."""

    def masked_softmax(self, x, out, scale=1.0, causal=False, key_mask=None):
        check_masked_softmax(x, out, key_mask)
        B, Tq, Tk = x.shape
        N = key_mask.shape[0] if key_mask is not None else 1
        for t, what in ((x, "x"), (out, "out")):
            if not t.is_contiguous:
                raise ValueError(f"masked_softmax: {what} must be contiguous")
        mask = key_mask
        if key_mask is not None and (key_mask.storage != x.storage or not key_mask.is_contiguous):
            mask = self.scratch(("mask", key_mask.shape), key_mask.shape, x.dtype)
            mask[:] = key_mask
        func = self.kernel("softmax", f"nl_masked_softmax_{x.storage}", "PPPiiiifi")
        self.device.launch(func, (max(1, min(B * Tq, self.device.sm_count * 32)), 1),
                           (256, 1, 1), [out.ptr, x.ptr, 0 if mask is None else mask.ptr, B, Tq,
                                         Tk, N, np.float32(scale), int(causal)])

    def masked_softmax_bprop(self, y, dy, dx, scale=1.0):
        OPS["masked_softmax_bprop"].check_operands((y, dy, dx), (scale,))
        dx[:] = scale * y * (dy - self.sum(dy * y, axis=-1))

    def _softmax_rows(self, logits, targets, probs, grad, rows_loss, scale):
        K = logits.shape[-1]
        M = logits.size // max(1, K)
        func = self.kernel("softmax", f"nl_softmax_xent_{logits.storage}", "PPPPPiif")
        self.device.launch(func, row_grid(M, self.device.sm_count * 32), (256, 1, 1),
                           [logits.ptr, 0 if targets is None else targets.ptr,
                            0 if probs is None else probs.ptr, 0 if grad is None else grad.ptr,
                            0 if rows_loss is None else rows_loss.ptr, M, K, np.float32(scale)])

    def _softmax_cross_entropy_index(self, logits, index, probs, grad, scale):
        if np.dtype(index.dtype) != np.int32 or not index.is_contiguous:
            raise TypeError(f"softmax_cross_entropy: class-index targets must be contiguous "
                            f"int32, got {index.dtype}")
        (logits,) = rows_of(self, "softmax_cross_entropy", logits)
        K = logits.shape[-1]
        M = logits.size // max(1, K)
        rows = self.scratch_prefix(("sce_rows",), (M, 1))
        total = self.scratch(("sce_loss",), (1, 1))
        func = self.kernel("softmax", f"nl_softmax_xent_index_{logits.storage}", "PPPPPiif")
        self.device.launch(func, row_grid(M, self.device.sm_count * 32), (256, 1, 1),
                           [logits.ptr, index.ptr, 0 if probs is None else probs.ptr, grad.ptr,
                            rows.ptr, M, K, np.float32(scale)])
        total[:] = self.sum(rows)
        loss = float(total.get().ravel()[0])
        if loss != loss:
            check_class_indices(index.get().reshape(-1), K)
        return loss

    def softmax(self, x, out, axis=-1):
        OPS["softmax"].check_operands((x, out), (axis,))
        if axis % x.ndim != x.ndim - 1 or not out.is_contiguous or x.storage != out.storage:
            out[:] = self.exp(x - self.max(x, axis=axis))
            out[:] = out / self.sum(out, axis=axis)
            return
        (x,) = rows_of(self, "softmax", x)
        self._softmax_rows(x, None, out, None, None, 1.0)

    index_targets = True

    def softmax_cross_entropy(self, logits, targets, probs, grad, scale=1.0):
        """As the contract (``scale`` 1 / rows for a mean loss, 1 for a sum); ``targets`` may
        be (M,) int32 class indices (``nl_softmax_xent_index``: a NaN loss with a bad index
        among them raises the IndexError naming it)."""
        check_contiguous("softmax_cross_entropy", probs=probs, grad=grad)
        indices = holds_integers(targets.dtype)  # bf16 one-hot targets are uint16 bits
        check_operand_sizes("softmax_cross_entropy", logits, logits.shape[-1],
                            whole=(("probs", probs), ("grad", grad)) + (
                                () if indices else (("targets", targets),)),
                            rows=(("targets", targets),) if indices else (),
                            free=("targets",) if indices else ())
        if indices:
            return self._softmax_cross_entropy_index(logits, targets, probs, grad, scale)
        logits, targets = rows_of(self, "softmax_cross_entropy", logits, targets)
        M = logits.size // max(1, logits.shape[-1])
        rows = self.scratch_prefix(("sce_rows",), (M, 1))
        total = self.scratch(("sce_loss",), (1, 1))
        self._softmax_rows(logits, targets, probs, grad, rows, scale)
        total[:] = self.sum(rows)
        return float(total.get().ravel()[0])
