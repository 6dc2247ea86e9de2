"""Block-sparse layouts (``layouts``) and their lookup tables (``tables``).  The plan of an op
is :class:`~neonlite.backends.blocksparse_plan.BlockSparsePlan` and the numpy reference ops are
``neonlite.backends.reference.blocksparse``; the layers are ``BlockSparseLinear``,
``BlockSparseAffine`` and ``BlockSparseAttention`` in ``neonlite.layers``; the backend ops are
``Backend.blocksparse_*``."""
from . import layouts
from .tables import Tables, compile_layout

__all__ = ["layouts", "Tables", "compile_layout"]
