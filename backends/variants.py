"""Which kernel a backend op ran, for the profiler's trace and per-op rows: the backend names
it, so the profiler asks (``be.kernel_variant(method, args, kwargs)``) instead of reading a backend's
kernels or testing which backend it is.  By default a backend's name; the CPU backend says
which convolution algorithm its plan chose (``direct``, ``tiled``, ``im2col``, ``1x1-gemm``,
or ``numpy``) and which GEMM provider it calls, the GPU backend ``cublas`` for GEMMs."""

CONV_METHODS = ("fprop_conv", "bprop_conv", "update_conv")
GEMM_METHODS = ("compound_dot", "batched_dot")


class KernelVariants:
    """The ``kernel_variant`` method of :class:`~.backend.Backend`."""

    def kernel_variant(self, method, args, kwargs=None):
        """A short name of the kernel behind one call of backend method ``method`` with the
        positional arguments ``args`` and keyword arguments ``kwargs``."""
        return self.name


def conv_algorithm(plan, method, default):
    """The convolution algorithm ``method`` (one of :data:`CONV_METHODS`) runs for ``plan``:
    the one its plan chose at configure time (``algorithm``, or ``bprop_algorithm`` for the
    data gradient), ``1x1-gemm`` for the pointwise case; ``default`` where the plan chose
    none."""
    chosen = getattr(plan, "bprop_algorithm" if method == "bprop_conv" else "algorithm", None)
    if chosen is None:
        return default
    return "1x1-gemm" if chosen == "pointwise" else chosen
