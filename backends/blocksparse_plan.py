"""The plan of a block-sparse op: layout, block size and lookup tables, made once at configure
time by ``Backend.blocksparse_layer``; a backend subclasses it with what it keeps (the CPU
backend's table pointers and pack buffers, the GPU backend's device tables)."""
from ..blocksparse.layouts import as_layout
from ..blocksparse.tables import compile_layout
from .plans import Plan

#: the block sizes the CPU and CUDA kernels are built for
SUPPORTED_BLOCK_SIZES = (8, 16, 32, 64)


class BlockSparsePlan(Plan):
    """Attributes: ``layout`` (H, R, C) uint8, ``bs`` (the block size), ``tables``
    (:class:`~neonlite.blocksparse.tables.Tables`, shared between identical layouts),
    ``heads``, ``rows``, ``cols``, ``nnz``."""

    def __init__(self, layout, block_size):
        super().__init__()
        if block_size not in SUPPORTED_BLOCK_SIZES:
            raise ValueError(f"block-sparse block size must be one of {SUPPORTED_BLOCK_SIZES} "
                             f"(the sizes the kernels are built for), got {block_size!r}")
        self.tables = compile_layout(as_layout(layout))
        if self.tables.nnz == 0:
            raise ValueError(f"block-sparse layout of shape {self.tables.layout.shape} has no "
                             f"blocks; at least one block must be stored")
        self.bs = int(block_size)
        self.layout = self.tables.layout
        self.heads, self.rows, self.cols = self.tables.heads, self.tables.rows, self.tables.cols
        self.nnz = self.tables.nnz

    def __repr__(self):
        return (f"BlockSparsePlan(layout {self.layout.shape}, bs={self.bs}, nnz={self.nnz}, "
                f"density={self.tables.density:.3f})")
