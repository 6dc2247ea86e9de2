"""The kernel variant a backend op ran, for the trace and the per-op rows: the convolution
algorithm the CPU backend's plan chose (``direct``, ``tiled``, ``im2col``, ``1x1-gemm``, or
``numpy``), the GEMM provider, or the backend's name for everything else."""


def conv_algorithm(be, plan, method):
    """Which of the CPU backend's convolution algorithms ``method`` (``fprop_conv``,
    ``bprop_conv``, ``update_conv``) runs for ``plan``: the one its plan chose at configure
    time (``algorithm``, or ``bprop_algorithm`` for the data gradient), ``1x1-gemm`` for the
    pointwise case; the backend's name where the plan chooses none."""
    chosen = getattr(plan, "bprop_algorithm" if method == "bprop_conv" else "algorithm", None)
    if chosen is None:
        return f"{getattr(be, 'name', 'backend')}"
    return "1x1-gemm" if chosen == "pointwise" else chosen


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
