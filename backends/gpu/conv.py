"""Convolution on the GPU (``Backend.conv_layer``, ``fprop_conv``, ``bprop_conv``,
``update_conv``).

Convolution runs as implicit GEMM (``kernels/cuda/conv_simt.cu`` for float32,
``conv_tc.cu`` on tensor cores for float16/bfloat16; :mod:`.conv_launch` picks the tile and K
split per pass when the layer is configured, into the plan, :class:`GPUConvPlan`): no patch
matrix is made.  A 1x1 stride-1 unpadded convolution is a plain cuBLAS GEMM in all three passes
(unless fprop fuses a bias or ReLU).  The im2col + cuBLAS path (an im2col kernel gathers the
(N*P*Q, R*S*C) patch matrix, a col2im gather returns the data gradient) remains only for
convolutions the implicit-GEMM kernels do not cover: a tensor or GEMM extent past 32-bit
indexing (:func:`.conv_launch.covered`).
"""
import numpy as np

from ..operand_shapes import check_conv
from ..plans import ConvPlan
from . import codegen, conv_launch
from .dense import dense, on_dense
from .tensor import is_bf16


def _dims(plan, *names):
    return [int(getattr(plan, n)) for n in names]


class GPUConvPlan(ConvPlan):
    """A :class:`ConvPlan` with the GPU backend's choices: ``covered`` (the implicit-GEMM
    kernels take it, :func:`conv_launch.covered`), the launch of each pass for the backend's
    storage chosen at configure time, and ``split_target`` (blocks a K split aims for)."""

    def __init__(self, N, C, H, W, K, R, S, pad=(0, 0), stride=(1, 1), dilation=(1, 1),
                 storage="f32", split_target=conv_launch.CONV_SPLIT_TARGET_BLOCKS):
        super().__init__(N, C, H, W, K, R, S, pad, stride, dilation)
        self.covered = conv_launch.covered(self)
        self.split_target = split_target
        self.launches = {}
        if self.covered:
            for pass_name in conv_launch.PASSES:
                self.launch(pass_name, storage)

    def launch(self, pass_name, storage):
        """The :class:`conv_launch.ConvLaunch` of ``pass_name`` for ``storage`` (chosen at
        configure time for the backend's storage; another storage's is chosen on first use)."""
        found = self.launches.get((pass_name, storage))
        if found is None:
            found = self.launches[(pass_name, storage)] = conv_launch.conv_launch(
                self, pass_name, storage, split_target=self.split_target)
        return found

    @property
    def dims(self):
        """The (N, H, W, C, P, Q, R, S, pad_h, pad_w, str_h, str_w, dil_h, dil_w) arguments of
        the im2col kernels."""
        return _dims(self, "N", "H", "W", "C", "P", "Q", "R", "S", "pad_h", "pad_w", "str_h",
                     "str_w", "dil_h", "dil_w")


class GPUConvOps:
    """``Backend.conv_layer`` and the convolution passes of
    :class:`~neonlite.backends.gpu.backend.GPUBackend` (see the module docstring)."""

    def _patches(self, plan, I):
        """The plan's patch matrix of I (N*P*Q, R*S*C), gathered by im2col."""
        rows, cols = plan.N * plan.P * plan.Q, plan.R * plan.S * plan.C
        patches = self.scratch(("patches", id(plan)), (rows, cols), I.dtype)
        func = self.kernel("im2col", f"nl_im2col_{I.storage}", "PP" + "i" * 14)
        self.device.launch(func, (self.device.blocks(rows * cols), 1), (256, 1, 1),
                           [patches.ptr, I.ptr] + plan.dims)
        return patches

    def conv_layer(self, N, C, H, W, K, R, S, pad=(0, 0), stride=(1, 1), dilation=(1, 1)):
        """A :class:`GPUConvPlan`, with the implicit-GEMM launch of each pass for this
        backend's storage chosen now."""
        return GPUConvPlan(N, C, H, W, K, R, S, pad, stride, dilation,
                           storage=codegen.storage_code(self.dtype, is_bf16(self.dtype)),
                           split_target=2 * self.device.sm_count)

    def _igemm(self, plan, pass_name, out, a, b, bias=None, beta=0.0, relu=False):
        """One pass as an implicit GEMM into contiguous ``out`` (see :mod:`gpu_conv`)."""
        for t, what in ((a, "input"), (b, "filter/error"), (bias, "bias")):
            if t is not None and t.storage != out.storage:
                raise TypeError(f"convolution {pass_name}: the {what} is {t.storage} but the "
                                f"output is {out.storage}; every operand must share a storage")
        launch = plan.launch(pass_name, out.storage)
        target = dense(self, out, "out")
        a, b = dense(self, a, "a"), dense(self, b, "b")
        bias = None if bias is None else dense(self, bias, "bias")
        work = 0
        if launch.splits > 1:
            work = self.scratch(("conv_work", launch.work_elems), (launch.work_elems,),
                                np.float32).ptr
        bias_ptr = 0 if bias is None else bias.ptr
        name = conv_launch.function_for(launch, target.ptr, a.ptr, b.ptr)
        func = self.kernel(launch.variant, name, "PPPPP" + "i" * 15 + "ifi")
        self.device.launch(func, launch.grid, launch.block,
                           [target.ptr, a.ptr, b.ptr, bias_ptr, work]
                           + conv_launch.shape_args(plan)
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
        check_conv("fprop_conv", plan, I=I, F=F, O=O, bias=bias)
        on_dense(self, "fprop_conv", lambda I, F, bias, O: self._fprop_conv(plan, I, F, O, bias,
                                                                             relu), O, I, F, bias)

    def _fprop_conv(self, plan, I, F, O, bias, relu):
        K = plan.K
        if plan.pointwise and bias is None and not relu:
            self.compound_dot(I.reshape(-1, plan.C), F.reshape(plan.C, K), O.reshape(-1, K))
            return
        if plan.covered:
            self._igemm(plan, "fprop", O, I, F, bias=bias, relu=relu)
            return
        self.compound_dot(self._patches(plan, I), F.reshape(-1, K), O.reshape(-1, K))
        if bias is not None:
            O[:] = O + bias.reshape(1, 1, 1, K)
        if relu:
            O[:] = self.maximum(O, 0.0)

    def bprop_conv(self, plan, F, E, grad_I, beta=0.0):
        check_conv("bprop_conv", plan, F=F, E=E, grad_I=grad_I)
        on_dense(self, "bprop_conv", lambda F, E, grad_I: self._bprop_conv(plan, F, E, grad_I,
                                                                            beta), grad_I, F, E)

    def _bprop_conv(self, plan, F, E, grad_I, beta):
        K = plan.K
        if plan.pointwise:
            self.compound_dot(E.reshape(-1, K), F.reshape(plan.C, K), grad_I.reshape(-1, plan.C),
                              beta=beta, transB=True)
            return
        if plan.covered:
            self._igemm(plan, "bprop", grad_I, E, F, beta=beta)
            return
        rows, cols = plan.N * plan.P * plan.Q, plan.R * plan.S * plan.C
        dpatches = self.scratch(("dpatches", id(plan)), (rows, cols), E.dtype)
        self.compound_dot(E.reshape(-1, K), F.reshape(-1, K), dpatches, transB=True)
        func = self.kernel("im2col", f"nl_col2im_{E.storage}", "PP" + "i" * 14 + "f")
        self.device.launch(func, (self.device.blocks(grad_I.size), 1), (256, 1, 1),
                           [grad_I.ptr, dpatches.ptr] + plan.dims
                           + [np.float32(beta)])

    def update_conv(self, plan, I, E, grad_F, beta=0.0):
        check_conv("update_conv", plan, I=I, E=E, grad_F=grad_F)
        on_dense(self, "update_conv", lambda I, E, grad_F: self._update_conv(plan, I, E, grad_F,
                                                                              beta), grad_F, I, E)

    def _update_conv(self, plan, I, E, grad_F, beta):
        K = plan.K
        if not plan.pointwise and plan.covered:
            self._igemm(plan, "update", grad_F, I, E, beta=beta)
            return
        patches = I.reshape(-1, plan.C) if plan.pointwise else self._patches(plan, I)
        self.compound_dot(patches, E.reshape(-1, K), grad_F.reshape(-1, K), beta=beta,
                          transA=True)
