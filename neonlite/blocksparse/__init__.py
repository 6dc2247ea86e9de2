"""Block-sparse ops: layouts (``layouts``), their lookup tables (``tables``) and the numpy
reference ops that walk them (``reference``).  The layers are ``BlockSparseLinear``,
``BlockSparseAffine`` and ``BlockSparseAttention`` in ``neonlite.layers``; the backend ops
are ``Backend.blocksparse_*``."""
from . import layouts, reference
from .tables import Tables, compile_layout

SUPPORTED_BLOCK_SIZES = (8, 16, 32, 64)

from .plan import BlockSparsePlan  # noqa: E402  (plan.py reads SUPPORTED_BLOCK_SIZES)

__all__ = ["layouts", "reference", "Tables", "compile_layout", "BlockSparsePlan",
           "SUPPORTED_BLOCK_SIZES"]
