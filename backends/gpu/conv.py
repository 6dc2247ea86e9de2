"""The GPU backend's network ops: convolution, pooling, masked softmax, rows.

Convolution runs as implicit GEMM (``kernels/cuda/conv_simt.cu`` for float32,
``conv_tc.cu`` on tensor cores for float16/bfloat16; :mod:`gpu_conv` picks the tile and K
split per pass when the layer is configured): no patch matrix is made.  A 1x1 stride-1
unpadded convolution is a plain cuBLAS GEMM in all three passes (unless fprop fuses a bias or
ReLU).  The im2col + cuBLAS path (an im2col kernel gathers the (N*P*Q, R*S*C) patch matrix, a
col2im gather returns the data gradient) remains only for convolutions the implicit-GEMM
kernels do not cover: a tensor or GEMM extent past 32-bit indexing (:func:`gpu_conv.covered`).
Pooling, masked softmax, row gather and scatter-add are CUDA kernels (``kernels/cuda``); batch
norm, layer norm, softmax and softmax-cross-entropy are in :mod:`gpu_norm`.  Nothing is copied
to the host except the scalar loss that ``softmax_cross_entropy`` returns.
"""
import numpy as np

from . import codegen as cuda_codegen, conv_launch as gpu_conv
from .tensor import is_bf16

_NUMPY_IDS = {"i32": "i32", "i64": "i64", "f32": "f32"}


def _dims(plan, *names):
    return [int(getattr(plan, n)) for n in names]


class GPUNNMixin:
    """Methods of :class:`~neonlite.backends.gpu.backend.GPUBackend` for layers' compute."""

    # ---- convolution -----------------------------------------------------------------------
    def _conv_dims(self, plan):
        return _dims(plan, "N", "H", "W", "C", "P", "Q", "R", "S", "pad_h", "pad_w", "str_h",
                     "str_w", "dil_h", "dil_w")

    @staticmethod
    def _pointwise(plan):
        return (plan.R == plan.S == 1 and plan.str_h == plan.str_w == 1
                and plan.pad_h == plan.pad_w == 0)

    def _patches(self, plan, I):
        """The plan's patch matrix of I (N*P*Q, R*S*C), gathered by im2col."""
        rows, cols = plan.N * plan.P * plan.Q, plan.R * plan.S * plan.C
        patches = self.scratch(("patches", id(plan)), (rows, cols), I.dtype)
        func = self.kernel("im2col", f"nl_im2col_{I.storage}", "PP" + "i" * 14)
        self.device.launch(func, (self.device.blocks(rows * cols), 1), (256, 1, 1),
                           [patches.ptr, I.ptr] + self._conv_dims(plan))
        return patches

    def conv_layer(self, N, C, H, W, K, R, S, pad=(0, 0), stride=(1, 1), dilation=(1, 1)):
        """The plan, with the implicit-GEMM launch of each pass for this backend's storage
        chosen now (``plan.igemm``: (pass, storage) -> :class:`gpu_conv.ConvLaunch`)."""
        plan = super().conv_layer(N, C, H, W, K, R, S, pad, stride, dilation)
        plan.igemm = {}
        if gpu_conv.covered(plan):
            storage = cuda_codegen.storage_code(self.dtype, is_bf16(self.dtype))
            for pass_name in gpu_conv.PASSES:
                self._conv_launch(plan, pass_name, storage)
        return plan

    def _conv_launch(self, plan, pass_name, storage):
        if not hasattr(plan, "igemm"):
            plan.igemm = {}
        launch = plan.igemm.get((pass_name, storage))
        if launch is None:
            launch = plan.igemm[(pass_name, storage)] = gpu_conv.conv_launch(
                plan, pass_name, storage, split_target=2 * self.device.sm_count)
        return launch

    def _dense(self, t, key):
        """``t`` when contiguous, else a contiguous scratch copy."""
        if t.is_contiguous:
            return t
        copy = self.scratch(("conv", key, t.shape), t.shape, t.dtype)
        copy[:] = t
        return copy

    def _igemm(self, plan, pass_name, out, a, b, bias=None, beta=0.0, relu=False):
        """One pass as an implicit GEMM into contiguous ``out`` (see :mod:`gpu_conv`)."""
        for t, what in ((a, "input"), (b, "filter/error"), (bias, "bias")):
            if t is not None and t.storage != out.storage:
                raise TypeError(f"convolution {pass_name}: the {what} is {t.storage} but the "
                                f"output is {out.storage}; every operand must share a storage")
        launch = self._conv_launch(plan, pass_name, out.storage)
        target = self._dense(out, "out")
        a, b = self._dense(a, "a"), self._dense(b, "b")
        bias = None if bias is None else self._dense(bias, "bias")
        work = 0
        if launch.splits > 1:
            work = self.scratch(("conv_work", launch.work_elems), (launch.work_elems,),
                                np.float32).ptr
        bias_ptr = 0 if bias is None else bias.ptr
        name = gpu_conv.function_for(launch, target.ptr, a.ptr, b.ptr)
        func = self.kernel(launch.variant, name, "PPPPP" + "i" * 15 + "ifi")
        self.device.launch(func, launch.grid, launch.block,
                           [target.ptr, a.ptr, b.ptr, bias_ptr, work]
                           + gpu_conv.shape_args(plan)
                           + [launch.splits, np.float32(beta), int(bool(relu))])
        if launch.splits > 1:
            reduce = self.kernel("conv_simt", f"nl_conv_splitk_reduce_{out.storage}",
                                 "PPPiiifi")
            self.device.launch(reduce, (self.device.blocks(launch.M * launch.Ng), 1),
                               (256, 1, 1), [target.ptr, work, bias_ptr, launch.M, launch.Ng,
                                             launch.splits, np.float32(beta),
                                             int(bool(relu))])
        if target is not out:
            out[:] = target

    def fprop_conv(self, plan, I, F, O, bias=None, relu=False):
        """O = conv(I, F) (+ ``bias`` (K,), then ReLU when ``relu``), the bias and ReLU fused
        in the kernel's epilogue."""
        K = plan.K
        if self._pointwise(plan) and bias is None and not relu:
            self.compound_dot(I.reshape(-1, plan.C), F.reshape(plan.C, K), O.reshape(-1, K))
            return
        if gpu_conv.covered(plan):
            self._igemm(plan, "fprop", O, I, F, bias=bias, relu=relu)
            return
        self.compound_dot(self._patches(plan, I), F.reshape(-1, K), O.reshape(-1, K))
        if bias is not None:
            O[:] = O + bias.reshape(1, 1, 1, K)
        if relu:
            O[:] = self.maximum(O, 0.0)

    def bprop_conv(self, plan, F, E, grad_I, beta=0.0):
        K = plan.K
        if self._pointwise(plan):
            self.compound_dot(E.reshape(-1, K), F.reshape(plan.C, K), grad_I.reshape(-1, plan.C),
                              beta=beta, transB=True)
            return
        if gpu_conv.covered(plan):
            self._igemm(plan, "bprop", grad_I, E, F, beta=beta)
            return
        rows, cols = plan.N * plan.P * plan.Q, plan.R * plan.S * plan.C
        dpatches = self.scratch(("dpatches", id(plan)), (rows, cols), E.dtype)
        self.compound_dot(E.reshape(-1, K), F.reshape(-1, K), dpatches, transB=True)
        func = self.kernel("im2col", f"nl_col2im_{E.storage}", "PP" + "i" * 14 + "f")
        self.device.launch(func, (self.device.blocks(grad_I.size), 1), (256, 1, 1),
                           [grad_I.ptr, dpatches.ptr] + self._conv_dims(plan)
                           + [np.float32(beta)])

    def update_conv(self, plan, I, E, grad_F, beta=0.0):
        K = plan.K
        if not self._pointwise(plan) and gpu_conv.covered(plan):
            self._igemm(plan, "update", grad_F, I, E, beta=beta)
            return
        patches = I.reshape(-1, plan.C) if self._pointwise(plan) else self._patches(plan, I)
        self.compound_dot(patches, E.reshape(-1, K), grad_F.reshape(-1, K), beta=beta,
                          transA=True)

    # ---- pooling ---------------------------------------------------------------------------
    def _pool_dims(self, plan):
        return _dims(plan, "N", "H", "W", "C", "P", "Q", "R", "S", "pad_h", "pad_w", "str_h",
                     "str_w")

    def fprop_pool(self, plan, I, O):
        argmax = self.scratch(("argmax", id(plan)), O.shape, np.int32)
        func = self.kernel("pool", f"nl_pool_fprop_{I.storage}", "PPP" + "i" * 13)
        self.device.launch(func, (self.device.blocks(O.size), 1), (256, 1, 1),
                           [O.ptr, I.ptr, argmax.ptr] + self._pool_dims(plan)
                           + [int(plan.op == "max")])

    def bprop_pool(self, plan, E, grad_I, beta=0.0):
        argmax = self.scratch(("argmax", id(plan)), E.shape, np.int32)
        func = self.kernel("pool", f"nl_pool_bprop_{E.storage}", "PPP" + "i" * 13 + "f")
        self.device.launch(func, (self.device.blocks(grad_I.size), 1), (256, 1, 1),
                           [grad_I.ptr, E.ptr, argmax.ptr] + self._pool_dims(plan)
                           + [int(plan.op == "max"), np.float32(beta)])

    # ---- softmax ---------------------------------------------------------------------------
    def masked_softmax(self, x, out, scale=1.0, causal=False, key_mask=None):
        B, Tq, Tk = x.shape
        N = key_mask.shape[0] if key_mask is not None else 1
        if key_mask is not None and (B % N or key_mask.shape[1] != Tk):
            raise ValueError(f"masked_softmax: key_mask {key_mask.shape} must be (N, {Tk}) with "
                             f"{B} a multiple of N")
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
        dx[:] = scale * y * (dy - self.sum(dy * y, axis=-1))

    # ---- rows and layout -------------------------------------------------------------------
    def _ids(self, ids):
        if ids.storage in _NUMPY_IDS and ids.is_contiguous:
            return ids, _NUMPY_IDS[ids.storage]
        copy = self.scratch(("ids", ids.shape), ids.shape, np.float32)
        copy[:] = ids
        return copy, "f32"

    def _check_ids(self, ids, bad, V):
        first = int(bad.get()[0])
        if first < ids.size:
            where = tuple(int(i) for i in np.unravel_index(first, ids.shape))
            raise IndexError(f"id {ids.get()[where]!r} at position {where} of ids {ids.shape} is "
                             f"not a row of the table: expected a whole number in [0, {V})")

    def _rows_call(self, name, dst, src, ids, V, D, n_threads):
        ids_c, kind = self._ids(ids)
        bad = self.scratch(("bad_id",), (1,), np.int64)
        bad.set(np.array([ids.size], dtype=np.int64))
        storage = dst.storage
        if name == "take_rows":
            func = self.kernel("rows", f"nl_take_rows_{storage}_{kind}", "PPPqqqP")
        else:
            func = self.kernel("rows", f"nl_scatter_add_rows_{storage}_{kind}", "PPPqqqP")
        self.device.launch(func, (self.device.blocks(n_threads), 1), (256, 1, 1),
                           [dst.ptr, src.ptr, ids_c.ptr, ids.size, V, D, bad.ptr])
        self._check_ids(ids, bad, V)

    def take_rows(self, table, ids, out):
        V, D = table.shape
        self._rows_call("take_rows", out, table, ids, V, D, ids.size * D)

    def scatter_add_rows(self, grad_table, ids, rows):
        V, D = grad_table.shape
        self._rows_call("scatter_add_rows", grad_table, rows, ids, V, D, D * min(V, 64))

    def permute_axes(self, x, out, axes):
        axes = [a % x.ndim for a in axes]
        swap_last = axes[:-2] == list(range(x.ndim - 2)) and axes[-2:] == [x.ndim - 1,
                                                                           x.ndim - 2]
        if swap_last and x.is_contiguous and out.is_contiguous and x.itemsize in (2, 4) \
                and x.storage == out.storage:
            R, C = x.shape[-2:]
            planes = x.size // max(1, R * C)
            func = self.kernel("transpose", f"nl_transpose_b{8 * x.itemsize}", "PPii")
            self.device.launch(func, (-(-C // 32), -(-R // 32), planes), (32, 8, 1),
                               [out.ptr, x.ptr, R, C])
            return
        out[:] = x.transpose(axes)
