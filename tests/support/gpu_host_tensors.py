"""Host stand-ins for GPU tensors, so the op-tree executor and the generated kernels can be
tested on the CPU (see ``cuda_host_emulator``).

:class:`HostTensor` wraps a numpy array (any view: its element strides are the descriptor's);
:class:`EmulatedOpTrees` runs :class:`~neonlite.backends.gpu.optree.OpTreeExecutor` with
deferred launches: ``run(fn)`` records every kernel ``fn`` launches, compiles all their sources
into one host module, then replays the launches in order.
"""
import numpy as np
from .cuda_host_emulator import HostModule

from neonlite.backends.gpu import codegen
from neonlite.backends.gpu.optree import OpTreeExecutor
from neonlite.backends.optree import OpTreeOps


class HostTensor(OpTreeOps):
    """A descriptor over numpy array ``ary``; ``storage`` defaults from its dtype ('bf16' for
    bfloat16 bits in a uint16 array)."""

    backend = "host"

    def __init__(self, ary, storage=None):
        self.ary = ary
        self.storage = storage or codegen.storage_code(ary.dtype)
        self.shape = ary.shape
        self.strides = tuple(s // ary.itemsize for s in ary.strides)
        self.dtype = ary.dtype


class EmulatedOpTrees:
    """Execute op-trees into HostTensors through the real executor and generated sources."""

    def __init__(self, max_blocks=3):
        self.sources, self.launches, self.temps = {}, [], {}
        self.executor = OpTreeExecutor(self._compile, self._launch, self._temporary, max_blocks)

    def _compile(self, name, source):
        self.sources[name] = source
        return name

    def _launch(self, kernel, plan, out, leaves, scalars):
        args = [out.ary] + [l.ary for l in leaves] + list(scalars) + list(plan.int_args)
        assert len(args) == len(plan.arg_format)
        self.launches.append((kernel, plan.grid, plan.block, args))

    def _temporary(self, key, shape):
        if key not in self.temps:
            self.temps[key] = HostTensor(np.zeros(shape, dtype=np.float32))
        return self.temps[key]

    def run(self, fn):
        """Call ``fn(execute)`` (``execute(out, tree)``), then run what it launched."""
        self.launches.clear()
        fn(self.executor.execute)
        nargs = {name: len(args) for name, _, _, args in self.launches}
        bodies = [self.sources[n].split(codegen.BODY_MARKER, 1)[1] for n in nargs]
        module = HostModule(bodies, nargs, prelude=codegen.common_header())
        for name, grid, block, args in self.launches:
            module.launch(name, grid, block, args)
