"""Block-sparse linear layers: y = x @ W with W stored as only the blocks of a layout."""
import numpy as np

from ..backends.blocksparse_plan import SUPPORTED_BLOCK_SIZES
from ..blocksparse.layouts import from_spec
from ..initializers import Constant, GlorotUniform
from .containers import CompoundLayer
from .decode import DecodeState
from .layer import ParameterLayer, flat_rows, is_count, prod


class BlockSparseLinear(ParameterLayer):
    """y = x @ W for a block-sparse W (nin, nout) of bs x bs blocks.

    ``layout`` has shape (nin/bs, nout/bs): entry (r, c) is 1 when block (r, c) of W is stored.
    The parameter ``W`` is (blocks, bs, bs): only the stored blocks, in the row-major order of
    the layout's nonzero entries (``np.nonzero(layout)``).  The layout is a 0/1 array, or (in
    YAML) a mapping of generators of :mod:`neonlite.blocksparse.layouts` resolved once nin is
    known, e.g. ``{random: {density: 0.25, seed: 0}}``.  The initializer sees the real fans of
    each block: fan_in = bs * (blocks in its column), fan_out = bs * (blocks in its row).

    Input (N, nin) or, per token, a sequence (N, T, nin) -> (N, T, nout), as ``Linear``.
    Block sizes 8, 16, 32 and 64.
    """

    variable_steps = True

    def __init__(self, nout, layout, block_size=32, init=None, name=None):
        super().__init__(name)
        if not is_count(nout):
            raise ValueError(f"BlockSparseLinear: nout must be a positive int, got {nout!r}")
        if block_size not in SUPPORTED_BLOCK_SIZES:
            raise ValueError(f"BlockSparseLinear: block_size must be one of "
                             f"{SUPPORTED_BLOCK_SIZES} (the sizes the kernels are built for), "
                             f"got {block_size!r}")
        self.nout, self.layout_spec, self.bs = int(nout), layout, int(block_size)
        self.init = init or GlorotUniform()

    def _error(self, what):
        return ValueError(f"layer '{self.name}' (BlockSparseLinear): {what}")

    def _configure(self, in_shape):
        if len(in_shape) == 0:
            raise self.shape_error("an input with at least one non-batch axis")
        self.per_token = len(in_shape) == 2
        self.nin = in_shape[-1] if self.per_token else prod(in_shape)
        bs = self.bs
        if self.nin % bs:
            raise self.shape_error(f"input features (nin={self.nin}) a multiple of "
                                   f"block_size={bs}")
        if self.nout % bs:
            raise self._error(f"nout={self.nout} is not a multiple of block_size={bs}")
        want = (self.nin // bs, self.nout // bs)
        try:
            layout = from_spec(self.layout_spec, want, where="layout")
        except ValueError as err:
            raise self._error(str(err)) from None
        if layout.shape != want:
            raise self._error(f"layout has shape {layout.shape} blocks, expected (nin/bs, "
                              f"nout/bs) = {want} for nin={self.nin}, nout={self.nout}, "
                              f"block_size={bs}")
        if not layout.any():
            raise self._error(f"the layout {layout.shape} has no blocks (all zeros); a "
                              f"block-sparse weight needs at least one stored block")
        self.plan = self.be.blocksparse_layer(layout, bs)
        return (in_shape[0], self.nout) if self.per_token else (self.nout,)

    def _max_steps(self):
        """A sequence input (N, T', D) of any 1 <= T' <= T, per token."""
        return self.in_shape[0] if self.per_token else None

    def param_shapes(self):
        return [(self.plan.tables.nnz, self.bs, self.bs)]

    def allocate(self):
        super().allocate()
        t, bs = self.plan.tables, self.bs
        self.W = self.add_param("W", (t.nnz, bs, bs), _PerBlockFans(self.init, t, bs),
                                self.nin, self.nout)

    def fprop(self, x, inference=False):
        self.x = x
        self.be.blocksparse_fprop(self.plan, flat_rows(x, self.nin), self.W.value,
                                  flat_rows(self.outputs, self.nout))
        return self.outputs

    def bprop(self, error):
        x2, e2 = flat_rows(self.x, self.nin), flat_rows(error, self.nout)
        self.be.blocksparse_update(self.plan, x2, e2, self.W.grad, beta=1.0)
        if self.needs_deltas:
            self.be.blocksparse_bprop(self.plan, e2, self.W.value,
                                      flat_rows(self.deltas, self.nin))
        return self.deltas

    def dense_weight(self):
        """W as a dense host array (nin, nout), zeros outside the layout."""
        from ..backends.reference.blocksparse import blocks_to_dense
        return blocks_to_dense(self.plan.tables, self.W.value.get(), self.bs)

    # ---- incremental decoding: position-wise ---------------------------------------------------
    def init_decode(self, batch, max_len):
        if not self.per_token:
            raise TypeError(f"layer '{self.name}' (BlockSparseLinear): incremental decoding "
                            f"needs sequence inputs (T, D)")
        state = DecodeState(self.be, batch, max_len)
        state.out = self.be.zeros((batch, 1, self.nout))
        return state

    def decode(self, x, state):
        """x (B, 1, nin) -> (B, 1, nout)."""
        self.be.blocksparse_fprop(self.plan, flat_rows(x, self.nin), self.W.value,
                                  flat_rows(state.out, self.nout))
        return state.out


class _PerBlockFans:
    """Draws each stored block with the user's initializer at the block's real fans:
    fan_in = bs * (blocks in its column of the layout), fan_out = bs * (blocks in its row)."""

    def __init__(self, init, tables, bs):
        self.init, self.tables, self.bs = init, tables, bs

    def generate(self, rng, shape, fan_in, fan_out):
        t, bs = self.tables, self.bs
        out = np.empty(shape)
        for k in range(t.nnz):
            out[k] = self.init.generate(rng, (bs, bs), bs * int(t.col_count[t.col[k]]),
                                        bs * int(t.row_count[t.row[k]]))
        return out


class BlockSparseAffine(CompoundLayer):
    """BlockSparseLinear (W (blocks, bs, bs)) + Bias (b (nout,)) + activation, under one name:
    y = act(x @ W + b)."""

    def __init__(self, nout, layout, block_size=32, init=None, bias=Constant(0.0),
                 activation=None, name=None):
        self.nout = nout
        super().__init__(BlockSparseLinear(nout, layout, block_size, init), bias, False,
                         activation, name)
