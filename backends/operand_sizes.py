"""The element counts the row-wise kernels (batch norm, layer norm, the fused softmax +
cross-entropy) read and write, checked before a kernel runs: they take sizes from the first
operand, x viewed as (M, width), and trust every other pointer, so an operand of another size
would be read or written past its end.  Shared by the CPU and GPU backends."""


def check_operand_sizes(op, x, width, whole=(), rows=(), columns=()):
    """Raise ValueError naming ``op``, the operand and both sizes unless each (name, tensor)
    of ``whole`` has x's element count, of ``rows`` one element per row of x (M = x.size /
    width) and of ``columns`` ``width`` elements; a None tensor is absent and passes."""
    width = int(width)
    M = x.size // max(width, 1)
    for group, count, what in ((whole, x.size, "as many as x"), (rows, M, "one per row of x"),
                               (columns, width, "one per column of x")):
        for name, t in group:
            if t is not None and t.size != count:
                raise ValueError(f"{op}: {name} has {t.size} elements (shape {tuple(t.shape)}); "
                                 f"expected {count}, {what} (x has shape {tuple(x.shape)}: "
                                 f"{M} rows of {width})")
