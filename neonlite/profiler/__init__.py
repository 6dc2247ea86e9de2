"""The built-in profiler: per-layer times, FLOPs, bytes and memory of chosen training steps,
as a table and as Chrome trace-event JSON (one file per MPI rank plus a merged one).

``with neonlite.profile("trace.json", steps=(5, 15)) as prof: model.fit(...)`` then
``prof.table()``; ``neonlite train FILE.yaml --profile TRACE.json``; ``neonlite profile
FILE.yaml``.  See :mod:`.session` (recording), :mod:`.instrument` (the wrappers),
:mod:`.flops` (FLOPs and bytes per op), :mod:`.memory`, :mod:`.report`, :mod:`.trace`.
"""
from .flops import OP_COSTS, conv_flops, gemm_flops, op_cost
from .memory import model_memory
from .session import DEFAULT_STEPS, Profile, parse_steps, profile

__all__ = ["profile", "Profile", "DEFAULT_STEPS", "parse_steps", "model_memory", "op_cost",
           "OP_COSTS", "conv_flops", "gemm_flops"]
