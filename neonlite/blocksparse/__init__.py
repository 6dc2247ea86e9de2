"""Block-sparse ops: layouts (``layouts``), their lookup tables (``tables``) and the numpy
reference ops that walk them (``reference``).  The layers are ``BlockSparseLinear``,
``BlockSparseAffine`` and ``BlockSparseAttention`` in ``neonlite.layers``; the backend ops
are ``Backend.blocksparse_*``."""
from . import layouts, reference
from .plan import SUPPORTED_BLOCK_SIZES, BlockSparsePlan
from .tables import Tables, compile_layout

__all__ = ["layouts", "reference", "Tables", "compile_layout", "BlockSparsePlan",
           "SUPPORTED_BLOCK_SIZES"]
