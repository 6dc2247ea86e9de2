"""Contiguous operands for the GPU section files' kernels, which read and write every operand
as flat rows: a strided view is copied into a scratch tensor of the backend (and an output
copied back), and every operand of a row kernel must share the first one's storage (an
output a kernel writes in place is checked by ``operand_sizes.check_contiguous``).  Module
functions over a :class:`~neonlite.backends.gpu.backend.GPUBackend` ``be`` (its public
``scratch``)."""


def dense(be, t, key):
    """``t`` when contiguous, else a contiguous scratch copy of it (kept under ``key``)."""
    if t.is_contiguous:
        return t
    copy = be.scratch(("dense", key, t.shape), t.shape, t.dtype)
    copy[:] = t
    return copy


def on_dense(be, op, run, out, *inputs):
    """``run(*inputs, out)`` on contiguous operands: strided views are copied into (and an
    output back from) scratch tensors."""
    target = dense(be, out, (op, "out"))
    run(*[None if t is None else dense(be, t, (op, i)) for i, t in enumerate(inputs)], target)
    if target is not out:
        out[:] = target


def rows_of(be, what, *tensors):
    """Contiguous versions of ``tensors`` (None stays None), after TypeError naming ``what``
    unless every one has the first one's storage."""
    storage = tensors[0].storage
    for t in tensors:
        if t is not None and t.storage != storage:
            raise TypeError(f"{what}: every tensor must have the {storage} storage of the "
                            f"first, got {t.storage}")
    return [None if t is None else dense(be, t, (what, i)) for i, t in enumerate(tensors)]

