"""Block layouts: 0/1 ``uint8`` arrays of blocks, pure numpy.

A layout of a block-sparse weight ``W`` (nin, nout) has shape (nin/bs, nout/bs); entry (r, c)
is 1 when the bs x bs block of rows r*bs:(r+1)*bs and columns c*bs:(c+1)*bs is stored.  An
attention layout has shape (nq, nk) (one for every head) or (heads, nq, nk) with nq = Tq/bs
query blocks and nk = Tk/bs key blocks (nq may differ from nk: cross-attention, or queries that
are the last Tq of Tk positions).  Every generator takes ``shape`` as (rows, cols) or
(heads, rows, cols) and counts in blocks, not tokens.

"Causal" follows ``Backend.masked_softmax``: query block i sees key block j when
j <= i + (nk - nq), i.e. the queries are the last nq blocks of the nk key positions.

:func:`from_spec` turns the YAML form of a layout, ``{generator: {option: value}, ...}`` (the
union of the named patterns, e.g. ``{local: {window: 4}, strided: {stride: 8}}``), into an
array once the layer knows its shape.
"""
import numpy as np

__all__ = ["random", "balanced", "banded", "block_diagonal", "local", "strided", "fixed", "causal",
           "dense", "per_head", "from_spec", "as_layout", "GENERATORS"]


def _grid(shape):
    """(rows, cols) index grids of a 2-D or 3-D layout shape, broadcast over heads."""
    shape = _check_shape(shape)
    rows, cols = shape[-2], shape[-1]
    i = np.arange(rows).reshape(rows, 1)
    j = np.arange(cols).reshape(1, cols)
    return shape, np.broadcast_to(i, (rows, cols)), np.broadcast_to(j, (rows, cols))


def _check_shape(shape):
    shape = (int(shape),) * 2 if np.isscalar(shape) else tuple(int(s) for s in shape)
    if len(shape) not in (2, 3) or min(shape) < 1:
        raise ValueError(f"a layout shape is (rows, cols) or (heads, rows, cols) of positive "
                         f"block counts, got {shape}")
    return shape


def _finish(shape, mask):
    """``mask`` (rows, cols) as a uint8 layout of ``shape`` (copied over heads)."""
    return np.ascontiguousarray(np.broadcast_to(mask, shape)).astype(np.uint8)


def _offset(shape):
    """The causal offset nk - nq (queries are the last nq blocks of the keys)."""
    return shape[-1] - shape[-2]


def dense(shape):
    """Every block."""
    shape = _check_shape(shape)
    return np.ones(shape, dtype=np.uint8)


def random(shape, density, seed=0):
    """round(density * rows * cols) blocks (at least one) per head, uniformly at random;
    each head draws its own blocks."""
    shape = _check_shape(shape)
    if not 0.0 < float(density) <= 1.0:
        raise ValueError(f"random layout: density must be in (0, 1], got {density!r}")
    rng = np.random.default_rng(seed)
    per = shape[-2] * shape[-1]
    count = max(1, int(round(float(density) * per)))
    heads = shape[0] if len(shape) == 3 else 1
    out = np.zeros((heads, per), dtype=np.uint8)
    for h in range(heads):
        out[h, rng.choice(per, size=count, replace=False)] = 1
    return out.reshape(shape)


def balanced(shape, density, seed=0):
    """round(density * cols) blocks (at least one) in every row, spread so that the columns
    hold as equal counts as possible (each row takes the least-used columns, ties at
    random): no input or output block is left without weights.  Each head draws its own."""
    shape = _check_shape(shape)
    if not 0.0 < float(density) <= 1.0:
        raise ValueError(f"balanced layout: density must be in (0, 1], got {density!r}")
    rng = np.random.default_rng(seed)
    rows, cols = shape[-2:]
    per_row = max(1, int(round(float(density) * cols)))
    heads = shape[0] if len(shape) == 3 else 1
    out = np.zeros((heads, rows, cols), dtype=np.uint8)
    for h in range(heads):
        used = np.zeros(cols)
        for i in rng.permutation(rows):
            pick = np.lexsort((rng.random(cols), used))[:per_row]
            out[h, i, pick] = 1
            used[pick] += 1
    return out.reshape(shape)


def banded(shape, width=1):
    """Blocks within ``width - 1`` of the diagonal: |i - j| < width (width >= 1)."""
    width = _positive("banded", "width", width)
    shape, i, j = _grid(shape)
    return _finish(shape, np.abs(i - j) < width)


def block_diagonal(shape, group):
    """Square groups of ``group`` x ``group`` blocks along the diagonal: i // group ==
    j // group."""
    group = _positive("block_diagonal", "group", group)
    shape, i, j = _grid(shape)
    return _finish(shape, i // group == j // group)


def local(shape, window, causal=False):
    """Each query block sees the ``window`` key blocks ending at its own diagonal block:
    i + off - window < j <= i + off (off = cols - rows); without ``causal`` also the
    ``window - 1`` blocks after it."""
    window = _positive("local", "window", window)
    shape, i, j = _grid(shape)
    d = i + _offset(shape) - j
    return _finish(shape, (d < window) & ((d >= 0) if causal else (d > -window)))


def strided(shape, stride, causal=False):
    """The strided half of the Sparse Transformer's strided pattern (Child et al. 2019) in
    blocks: every block a multiple of ``stride`` away from the diagonal ((i + off - j) %
    stride == 0).  The full pattern is its union with ``local(stride)``
    (``{local: {window: s}, strided: {stride: s}}``)."""
    stride = _positive("strided", "stride", stride)
    shape, i, j = _grid(shape)
    d = i + _offset(shape) - j
    mask = d % stride == 0
    if causal:
        mask &= d >= 0
    return _finish(shape, mask)


def fixed(shape, stride, summary=1, causal=False):
    """The Sparse Transformer's fixed pattern in blocks: the blocks of the query's own group
    of ``stride`` (i // stride == j // stride, key index shifted by the causal offset) plus the
    last ``summary`` blocks of every group (j % stride >= stride - summary)."""
    stride = _positive("fixed", "stride", stride)
    summary = _positive("fixed", "summary", summary)
    if summary > stride:
        raise ValueError(f"fixed layout: summary={summary} exceeds stride={stride}")
    shape, i, j = _grid(shape)
    off = _offset(shape)
    mask = ((i + off) // stride == j // stride) | (j % stride >= stride - summary)
    if causal:
        mask &= j <= i + off
    return _finish(shape, mask)


def causal(layout):
    """``layout`` without the blocks above the causal diagonal (j > i + nk - nq)."""
    layout = as_layout(layout)
    _, i, j = _grid(layout.shape)
    return (layout * (j <= i + _offset(layout.shape))).astype(np.uint8)


def per_head(layouts):
    """Stack per-head 2-D layouts of equal shape into one (heads, rows, cols) layout."""
    layouts = [as_layout(x) for x in layouts]
    if not layouts or any(x.ndim != 2 or x.shape != layouts[0].shape for x in layouts):
        raise ValueError(f"per_head needs 2-D layouts of one shape, got "
                         f"{[x.shape for x in layouts]}")
    return np.stack(layouts).astype(np.uint8)


GENERATORS = {"dense": dense, "random": random, "balanced": balanced, "banded": banded,
              "block_diagonal": block_diagonal, "local": local, "strided": strided,
              "fixed": fixed}


def as_layout(value, where="layout"):
    """A 2-D or 3-D array of 0/1 as a C-contiguous uint8 layout; a ``ValueError`` naming
    ``where`` otherwise."""
    try:
        arr = np.asarray(value)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{where}: expected a 0/1 array of blocks, got {value!r}") from err
    if arr.ndim not in (2, 3) or arr.size == 0:
        raise ValueError(f"{where}: expected a 0/1 array of blocks (rows, cols) or "
                         f"(heads, rows, cols), got shape {arr.shape}")
    if arr.dtype.kind not in "biuf" or not np.isin(arr, (0, 1)).all():
        raise ValueError(f"{where}: entries must be 0 or 1, got values "
                         f"{np.unique(arr)[:6].tolist()}")
    return np.ascontiguousarray(arr, dtype=np.uint8)


def from_spec(spec, shape, causal_mask=False, where="layout"):
    """The layout of ``shape`` that ``spec`` describes: an array (checked and returned), or a
    mapping ``{generator: options}`` whose patterns are OR-ed (options a mapping of keyword
    arguments, or one number for the generator's first option).  ``causal_mask`` removes
    the blocks above the causal diagonal from the result."""
    if isinstance(spec, dict):
        if not spec:
            raise ValueError(f"{where}: an empty mapping names no pattern; expected e.g. "
                             f"{{local: {{window: 4}}, strided: {{stride: 8}}}}")
        out = np.zeros(_check_shape(shape), dtype=np.uint8)
        for name, options in spec.items():
            gen = GENERATORS.get(name)
            if gen is None:
                raise ValueError(f"{where}.{name}: unknown layout pattern; expected one of "
                                 f"{sorted(GENERATORS)}")
            try:
                part = gen(shape, **options) if isinstance(options, dict) else \
                    (gen(shape) if options is None else gen(shape, options))
            except TypeError as err:
                raise ValueError(f"{where}.{name}: {err}") from err
            out |= part
        layout = out
    else:
        layout = as_layout(spec, where)
    return causal(layout) if causal_mask else layout


def _positive(gen, what, value):
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{gen} layout: {what} must be a positive int, got {value!r}")
    return int(value)
