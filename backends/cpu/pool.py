"""Pooling on the CPU (``Backend.fprop_pool``, ``bprop_pool``): the plan :class:`CPUPoolPlan` (the
``pool.c`` module and its ``pool_geom`` struct, chosen at configure time, and its passes on
numpy arrays) and the backend's ops (:class:`CPUPoolOps`). Max pooling records each output's
argmax (int32, (N, P, Q, C)) in the plan for the bprop that follows.  On bfloat16 operands
(bit patterns) the plan's ``*_bf16`` passes read and write bf16 directly (``pool.c``), so the
bf16 boundary keeps no float32 copy of a pooling's operands (:meth:`CPUPoolOps.fused_fprop_pool`,
:meth:`CPUPoolOps.fused_bprop_pool`)."""
import numpy as np

from ..operand_shapes import check_pool
from ..plans import PoolPlan
from ..reference import pool as reference
from .bf16_boundary import NOT_TAKEN
from .build import FLOATS, contiguous
from .conv_bf16 import bf16_arrays

_BITS = np.dtype(np.uint16)


def _bits(*arrays):
    return all(a.dtype == _BITS and a.flags.c_contiguous for a in arrays)


class CPUPoolPlan(PoolPlan):
    """A :class:`PoolPlan` with ``dtype``, ``pool`` (the cffi module of ``pool.c`` for it, or
    None: the numpy reference runs) and ``geom`` (its ``pool_geom`` struct), chosen once from
    ``kernels`` (a :class:`~neonlite.backends.cpu.build.KernelModules`) when the layer is
    configured; the argmax of the last C :meth:`fprop` is in the buffer table."""

    def __init__(self, op, N, C, H, W, R, S, pad=(0, 0), stride=(1, 1), kernels=None,
                 dtype=np.float32):
        super().__init__(op, N, C, H, W, R, S, pad, stride)
        self.dtype = np.dtype(dtype)
        self.pool = self.geom = None
        self._argmax_fresh = False
        if kernels is not None and self.dtype in FLOATS:
            self.pool = kernels.module("pool", self.dtype)
        if self.pool is not None:
            self.geom = self.pool.ffi.new("pool_geom *", {
                "N": N, "H": self.H, "W": self.W, "C": self.C, "P": self.P, "Q": self.Q,
                "R": self.R, "S": self.S, "pad_h": self.pad_h, "pad_w": self.pad_w,
                "str_h": self.str_h, "str_w": self.str_w})

    def geom_for(self, n):
        """(``pool_geom`` for a batch of ``n``, its argmax buffer (n, P, Q, C) int32)."""
        self.geom.N = n
        return self.geom, self.buffer("argmax c", (n, self.P, self.Q, self.C), np.int32,
                                      fill=0)

    def mark_argmax(self, fresh):
        """Whether the argmax buffer holds the last fprop's (a numpy fprop leaves it stale)."""
        self._argmax_fresh = fresh

    @property
    def argmax_fresh(self):
        return self._argmax_fresh

    def fprop(self, x, o):
        """o (N, P, Q, C) = max or average pooling of numpy x (N, H, W, C) by the C kernels;
        max records the argmax.  False where they do not take the arrays."""
        self.mark_argmax(False)
        if self.pool is None or x.dtype != self.dtype or not contiguous(x, o):
            return False
        geom, argmax = self.geom_for(x.shape[0])
        ffi, lib = self.pool.ffi, self.pool.lib
        if self.op == "max":
            lib.maxpool_fprop(ffi.from_buffer("real[]", x), ffi.from_buffer("real[]", o),
                              ffi.from_buffer("int32_t[]", argmax), geom)
            self.mark_argmax(True)
        else:
            lib.avgpool_fprop(ffi.from_buffer("real[]", x), ffi.from_buffer("real[]", o), geom)
        return True

    def bprop(self, e, grad_x, beta=0.0):
        """grad_x (N, H, W, C) = beta * grad_x + e (N, P, Q, C) routed back through the
        windows (max: to the argmax of the last C :meth:`fprop`).  False where the C kernels
        do not take the arrays."""
        if self.pool is None or (self.op == "max" and not self.argmax_fresh) \
                or e.dtype != self.dtype or grad_x.dtype != e.dtype:
            return False
        e = np.ascontiguousarray(e)
        target = grad_x if grad_x.flags.c_contiguous else np.ascontiguousarray(grad_x)
        geom, argmax = self.geom_for(e.shape[0])
        ffi, lib = self.pool.ffi, self.pool.lib
        if self.op == "max":
            lib.maxpool_bprop(ffi.from_buffer("real[]", e), ffi.from_buffer("int32_t[]", argmax),
                              ffi.from_buffer("real[]", target), geom, beta)
        else:
            lib.avgpool_bprop(ffi.from_buffer("real[]", e), ffi.from_buffer("real[]", target),
                              geom, beta)
        if target is not grad_x:
            np.copyto(grad_x, target)
        return True

    def fprop_bf16(self, x, o):
        """:meth:`fprop` on bf16 ``x`` and ``o`` (C-contiguous bits); False where the C kernels
        do not take them."""
        self.mark_argmax(False)
        if self.pool is None or self.dtype != FLOATS[0] or not _bits(x, o):
            return False
        geom, argmax = self.geom_for(x.shape[0])
        ffi, lib = self.pool.ffi, self.pool.lib
        bits = lambda a: ffi.cast("uint16_t *", a.ctypes.data)  # noqa: E731
        if self.op == "max":
            lib.maxpool_fprop_bf16(bits(x), bits(o), ffi.from_buffer("int32_t[]", argmax), geom)
            self.mark_argmax(True)
        else:
            lib.avgpool_fprop_bf16(bits(x), bits(o), geom)
        return True

    def bprop_bf16(self, e, grad_x, beta=0.0):
        """:meth:`bprop` on bf16 ``e`` and ``grad_x`` (C-contiguous bits), overlapping windows
        summed in a float32 image per thread (the plan's work array) and rounded once; False
        where the C kernels do not take them."""
        if self.pool is None or self.dtype != FLOATS[0] or not _bits(e, grad_x) \
                or (self.op == "max" and not self.argmax_fresh):
            return False
        geom, argmax = self.geom_for(e.shape[0])
        ffi, lib = self.pool.ffi, self.pool.lib
        work, nwork = ffi.NULL, 1
        if lib.pool_bf16_overlapping(geom):
            nwork = max(1, int(lib.pool_threads()))
            work = ffi.from_buffer("real[]", self.buffer(
                "bf16 images", (nwork * self.H * self.W * self.C,), self.dtype))
        bits = lambda a: ffi.cast("uint16_t *", a.ctypes.data)  # noqa: E731
        if self.op == "max":
            lib.maxpool_bprop_bf16(bits(e), ffi.from_buffer("int32_t[]", argmax), bits(grad_x),
                                   geom, beta, work, nwork)
        else:
            lib.avgpool_bprop_bf16(bits(e), bits(grad_x), geom, beta, work, nwork)
        return True


class CPUPoolOps:
    """``Backend.pool_layer`` and the pooling passes of the CPU backend: the C kernels where
    the plan has them, else the numpy reference."""

    def pool_layer(self, op, N, C, H, W, R, S, pad=(0, 0), stride=None):
        return CPUPoolPlan(op, N, C, H, W, R, S, pad, stride or (R, S), kernels=self.kernels,
                           dtype=self.compute_dtype)

    def fprop_pool(self, plan, I, O):
        check_pool("fprop_pool", plan, I=I, O=O)
        if not (isinstance(plan, CPUPoolPlan) and plan.fprop(I._ary, O._ary)):
            reference.fprop_pool(plan, I._ary, O._ary)

    def bprop_pool(self, plan, E, grad_I, beta=0.0):
        check_pool("bprop_pool", plan, E=E, grad_I=grad_I)
        if not (isinstance(plan, CPUPoolPlan) and plan.bprop(E._ary, grad_I._ary, beta)):
            reference.bprop_pool(plan, E._ary, grad_I._ary, beta)

    def fused_fprop_pool(self, arguments):
        """``fprop_pool`` on bf16 operands by :meth:`CPUPoolPlan.fprop_bf16`, else
        ``NOT_TAKEN`` (the bf16 boundary widens and narrows)."""
        plan, I, O = arguments["plan"], arguments["I"], arguments["O"]
        arrays = bf16_arrays(I, O)
        if arrays is None or not isinstance(plan, CPUPoolPlan):
            return NOT_TAKEN
        check_pool("fprop_pool", plan, I=I, O=O)
        return None if plan.fprop_bf16(*arrays) else NOT_TAKEN

    def fused_bprop_pool(self, arguments):
        """``bprop_pool`` on bf16 operands by :meth:`CPUPoolPlan.bprop_bf16`, else
        ``NOT_TAKEN``."""
        plan, E, grad_I = arguments["plan"], arguments["E"], arguments["grad_I"]
        arrays = bf16_arrays(E, grad_I)
        if arrays is None or not isinstance(plan, CPUPoolPlan):
            return NOT_TAKEN
        check_pool("bprop_pool", plan, E=E, grad_I=grad_I)
        return None if plan.bprop_bf16(*arrays, arguments["beta"]) else NOT_TAKEN
