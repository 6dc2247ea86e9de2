"""The kernel variant a backend op ran, for the trace and the per-op rows: the convolution
algorithm the CPU backend chose (``direct``, ``tiled``, ``im2col``, ``1x1`` GEMM, or the numpy
fallback), the GEMM provider, or the backend's name for everything else."""


def conv_algorithm(be, plan, method):
    """Which of the CPU backend's convolution paths ``method`` (``fprop_conv``,
    ``bprop_conv``, ``update_conv``) takes for ``plan``: read from the work buffers the
    kernels keep on the plan once they have run, so call it after the op."""
    kernels = getattr(be, "kernels", None)
    if kernels is None:
        return f"{getattr(be, 'name', 'backend')}"
    if plan.R == plan.S == 1 and plan.str_h == plan.str_w == 1 and \
            plan.pad_h == plan.pad_w == 0:
        return "1x1-gemm"
    direct = getattr(plan, "_ckernel_direct", None) or {}
    if direct.get(method == "bprop_conv") is not None:
        return "direct"
    if getattr(plan, "_ckernel_tiles", None) is not None:
        return "tiled"
    if getattr(plan, "_ckernel_conv", None) is not None:
        return "im2col"
    return "numpy"


def op_variant(method, be, args):
    """A short name of the kernel behind one op call."""
    name = getattr(be, "name", "backend")
    if method in ("fprop_conv", "bprop_conv", "update_conv") and name == "cpu":
        return conv_algorithm(be, args[0], method)
    if method in ("compound_dot", "batched_dot"):
        gemm = getattr(getattr(be, "kernels", None), "gemm", None)
        return type(gemm).__name__ if gemm is not None else ("cublas" if name == "gpu"
                                                             else name)
    return name
