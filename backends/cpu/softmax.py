"""Softmax, fused softmax-cross-entropy and the masked attention softmax on the CPU: the calls of
``kernels/cpu/softmax.c`` and ``attention_softmax.c`` (:class:`SoftmaxKernels`) and the
backend's ops (:class:`CPUSoftmaxOps`), which run the numpy reference where the kernels do not
take the case.  Each works over the last axis."""
import numpy as np

from ..operand_shapes import check_masked_softmax, check_rows_alike
from ..operand_sizes import check_operand_sizes
from ..reference import softmax as reference
from ..shared.class_indices import check_class_indices
from .tensor import array_of as _ary


class SoftmaxKernels:
    """The softmax calls of :class:`~neonlite.backends.cpu.kernels.CPUKernels` (True, or the
    loss, when done; False where the numpy reference must run)."""

    def softmax(self, x, out, axis=-1):
        """out = softmax(x) over the last axis (other axes: False)."""
        if x.ndim == 0 or axis not in (-1, x.ndim - 1) or x.shape != out.shape:
            return False
        module = self.usable("softmax", x, out)
        if module is None:
            return False
        K = x.shape[-1]
        module.lib.softmax_rows(module.ffi.from_buffer("real[]", x),
                                module.ffi.from_buffer("real[]", out), x.size // max(K, 1), K)
        return True

    def softmax_cross_entropy(self, logits, targets, probs, grad, scale):
        """Fused softmax + cross-entropy of (M, K) arrays, targets (M, K) one-hot or soft, or
        (M,) int32 class indices; returns the summed loss or False.  A class index outside
        [0, K) raises shared.class_indices.check_class_indices's IndexError, which names it."""
        indices = targets.dtype.kind in "iu"
        check_operand_sizes("softmax_cross_entropy", logits, logits.shape[-1] if logits.ndim else 1,
                            whole=(("probs", probs), ("grad", grad)) + (
                                () if indices else (("targets", targets),)),
                            rows=(("targets", targets),) if indices else (),
                            free=("targets",) if indices else ())
        if indices:
            module = self.usable("softmax", logits, probs, grad)
            if module is None or targets.dtype != np.int32 or not targets.flags.c_contiguous:
                return False
            ffi = module.ffi
            bad = self._bad_index
            K = logits.shape[-1]
            loss = float(module.lib.softmax_cross_entropy_index(
                *(ffi.from_buffer("real[]", a) if a is not targets
                  else ffi.from_buffer("int32_t[]", a) for a in (logits, targets, probs, grad)),
                logits.size // max(K, 1), K, scale, ffi.from_buffer("int64_t[]", bad)))
            if bad[0] >= 0:
                check_class_indices(targets, K)
            return loss
        module = self.usable("softmax", logits, targets, probs, grad)
        if module is None:
            return False
        ptrs = [module.ffi.from_buffer("real[]", a) for a in (logits, targets, probs, grad)]
        K = logits.shape[-1]
        return float(module.lib.softmax_cross_entropy(*ptrs, logits.size // max(K, 1), K,
                                                      scale))

    def masked_softmax(self, x, out, scale, causal, key_mask):
        """Masked softmax of scores (B, Tq, Tk); key_mask (N, Tk) or None (any dtype)."""
        if x.ndim != 3 or x.shape != out.shape:
            return False
        module = self.usable("attention_softmax", x, out)
        if module is None:
            return False
        ffi = module.ffi
        B, Tq, Tk = x.shape
        mask, N = ffi.NULL, 1
        if key_mask is not None:
            keep = np.ascontiguousarray(key_mask, dtype=x.dtype)
            if keep.ndim != 2 or keep.shape[1] != Tk or B % max(keep.shape[0], 1):
                return False
            mask, N = ffi.from_buffer("real[]", keep), keep.shape[0]
        module.lib.attention_softmax_fprop(ffi.from_buffer("real[]", x),
                                           ffi.from_buffer("real[]", out), B, Tq, Tk, scale,
                                           bool(causal), mask, N)
        return True

    def masked_softmax_bprop(self, y, dy, dx, scale):
        """dx = scale * y * (dy - rowsum(dy * y)) over the last axis."""
        if y.ndim == 0 or not y.shape == dy.shape == dx.shape:
            return False
        module = self.usable("attention_softmax", y, dy, dx)
        if module is None:
            return False
        ffi = module.ffi
        Tk = y.shape[-1]
        module.lib.attention_softmax_bprop(ffi.from_buffer("real[]", y),
                                           ffi.from_buffer("real[]", dy),
                                           ffi.from_buffer("real[]", dx), y.size // max(Tk, 1),
                                           Tk, scale)
        return True


class CPUSoftmaxOps:
    """The softmax and cross-entropy ops of the CPU backend."""

    index_targets = True

    def softmax(self, x, out, axis=-1):
        check_rows_alike("softmax", None, x=x, out=out)
        if not self.kernels.softmax(x._ary, out._ary, axis):
            reference.softmax(x._ary, out._ary, axis)

    def onehot(self, indices, out):
        idx, rows = indices._ary.reshape(-1), out._ary
        if idx.size and (idx.min() < 0 or idx.max() >= rows.shape[-1]):
            check_class_indices(idx, rows.shape[-1])
        rows.fill(0)
        np.put_along_axis(rows, idx[:, None].astype(np.intp, copy=False), 1, axis=-1)
        return out

    def softmax_cross_entropy(self, logits, targets, probs, grad, scale=1.0):
        arrays = tuple(map(_ary, (logits, targets, probs, grad)))
        loss = self.kernels.softmax_cross_entropy(*arrays, scale)
        if loss is False:
            loss = reference.softmax_cross_entropy(*arrays, scale)
        return loss

    def masked_softmax(self, x, out, scale=1.0, causal=False, key_mask=None):
        check_masked_softmax(x, out, key_mask)
        mask = None if key_mask is None else key_mask._ary
        if not self.kernels.masked_softmax(x._ary, out._ary, scale, causal, mask):
            reference.masked_softmax(x._ary, out._ary, scale, causal, mask)

    def masked_softmax_bprop(self, y, dy, dx, scale=1.0):
        check_rows_alike("masked_softmax_bprop", None, y=y, dy=dy, dx=dx)
        if not self.kernels.masked_softmax_bprop(y._ary, dy._ary, dx._ary, scale):
            reference.masked_softmax_bprop(y._ary, dy._ary, dx._ary, scale)
