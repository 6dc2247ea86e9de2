"""Softmax ops on the CPU where the backend makes a choice: the fused softmax-cross-entropy
(``kernels/cpu/softmax.c``; one-hot or class-index targets, the loss returned), the masked
attention softmax (``attention_softmax.c``; a key mask of any element type read as x's) and
``onehot``, each else the numpy reference.  ``softmax`` and ``masked_softmax_bprop`` are
dispatched by the op table (``ops/softmax.py``).  Each works over the last axis."""
import numpy as np

from ..operand_shapes import check_masked_softmax
from ..operand_sizes import check_operand_sizes
from ..reference import softmax as reference
from ..shared.bfloat16 import holds_integers
from ..shared.class_indices import check_class_indices
from .bf16_boundary import NOT_TAKEN, is_bf16_tensor
from .build import FLOATS

#: the ``workspaces`` key of the one-number array where the class-index kernel writes the
#: position of the first index outside [0, K) (-1: none)
BAD_INDEX = ("softmax_cross_entropy_index", "bad index")


def _check_cross_entropy(logits, targets, probs, grad):
    """The operands' sizes and element types (tensors, or float arrays)."""
    indices = holds_integers(targets.dtype)
    check_operand_sizes("softmax_cross_entropy", logits, logits.shape[-1] if logits.ndim else 1,
                        whole=(("probs", probs), ("grad", grad)) + (
                            () if indices else (("targets", targets),)),
                        rows=(("targets", targets),) if indices else (),
                        free=("targets",) if indices else ())


def softmax_cross_entropy_kernel(kernels, logits, targets, probs, grad, scale, bf16=False):
    """Fused softmax + cross-entropy of numpy (M, K) arrays by the C kernels of ``kernels``
    (a :class:`~neonlite.backends.cpu.build.KernelModules`), targets (M, K) one-hot or soft,
    or (M,) int32 class indices; returns the summed loss, or False where the kernels do not
    take the arrays.  A class index outside [0, K) raises
    ``shared.class_indices.check_class_indices``'s IndexError, which names it.  ``bf16``:
    logits, probs, grad and one-hot targets are contiguous bf16 bit arrays whose tensors the
    caller checked (the ``*_bf16`` functions, no float copy)."""
    indices = holds_integers(targets.dtype)
    if not bf16:
        _check_cross_entropy(logits, targets, probs, grad)
    K = logits.shape[-1]
    M = logits.size // max(K, 1)
    rows = (logits, probs, grad) if indices else (logits, targets, probs, grad)
    if bf16:
        module = kernels.module("softmax", FLOATS[0])
        if module is None or not all(a.flags.c_contiguous for a in rows):
            return False
    else:
        module = kernels.usable("softmax", *rows)
    if module is None or indices and (targets.dtype != np.int32
                                      or not targets.flags.c_contiguous):
        return False
    ffi, suffix = module.ffi, "_bf16" if bf16 else ""
    real = (lambda a: ffi.cast("uint16_t *", a.ctypes.data)) if bf16 else \
        (lambda a: ffi.from_buffer("real[]", a))
    if not indices:
        return float(getattr(module.lib, "softmax_cross_entropy" + suffix)(
            *(real(a) for a in rows), M, K, scale))
    bad = kernels.workspaces.get(BAD_INDEX)
    if bad is None:
        bad = kernels.workspaces[BAD_INDEX] = np.zeros(1, dtype=np.int64)
    loss = float(getattr(module.lib, "softmax_cross_entropy_index" + suffix)(
        real(logits), ffi.from_buffer("int32_t[]", targets), real(probs), real(grad),
        M, K, scale, ffi.from_buffer("int64_t[]", bad)))
    if bad[0] >= 0:
        check_class_indices(targets, K)
    return loss


def masked_softmax_kernel(kernels, x, out, scale, causal, key_mask):
    """Masked softmax of numpy scores x (B, Tq, Tk) into out by the C kernels of ``kernels``;
    key_mask (N, Tk) or None (any element type); False where they do not take the arrays."""
    if x.ndim != 3 or x.shape != out.shape:
        return False
    module = kernels.usable("attention_softmax", x, out)
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


class CPUSoftmaxOps:
    """The softmax and cross-entropy ops of the CPU backend that the op table does not make."""

    index_targets = True

    def onehot(self, indices, out):
        idx, rows = indices._ary.reshape(-1), out._ary
        if idx.size and (idx.min() < 0 or idx.max() >= rows.shape[-1]):
            check_class_indices(idx, rows.shape[-1])
        rows.fill(0)
        np.put_along_axis(rows, idx[:, None].astype(np.intp, copy=False), 1, axis=-1)
        return out

    def softmax_cross_entropy(self, logits, targets, probs, grad, scale=1.0):
        arrays = tuple(t._ary for t in (logits, targets, probs, grad))
        loss = softmax_cross_entropy_kernel(self.kernels, *arrays, scale)
        if loss is False:
            loss = reference.softmax_cross_entropy(*arrays, scale)
        return loss

    def fused_softmax_cross_entropy(self, arguments):
        """``softmax_cross_entropy`` on bf16 logits, probs and grad (with bf16 one-hot or soft
        targets, or int32 class indices) by the ``*_bf16`` C functions: no float copy of the
        operands; the loss, or ``NOT_TAKEN`` where the kernels do not take them (the bf16
        boundary's general path runs)."""
        logits, targets, probs, grad = (arguments[n] for n in
                                        ("logits", "targets", "probs", "grad"))
        if not all(is_bf16_tensor(t) for t in (logits, probs, grad)) or not (
                is_bf16_tensor(targets) or targets._ary.dtype.kind in "iu"):
            return NOT_TAKEN
        _check_cross_entropy(logits, targets, probs, grad)
        loss = softmax_cross_entropy_kernel(
            self.kernels, *(t._ary for t in (logits, targets, probs, grad)),
            arguments["scale"], bf16=True)
        return NOT_TAKEN if loss is False else loss

    def masked_softmax(self, x, out, scale=1.0, causal=False, key_mask=None):
        check_masked_softmax(x, out, key_mask)
        mask = None if key_mask is None else key_mask._ary
        if not masked_softmax_kernel(self.kernels, x._ary, out._ary, scale, causal, mask):
            reference.masked_softmax(x._ary, out._ary, scale, causal, mask)
