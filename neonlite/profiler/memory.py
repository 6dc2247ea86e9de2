"""Memory per layer: the bytes of the backend buffers each layer holds, by kind.

Kinds: ``params`` (parameter values), ``grads`` (their gradients), ``optimizer`` (the
optimizer's per-parameter state), ``activations`` (every other backend tensor the layer
allocated: outputs, deltas, values kept for bprop, scratch) and ``workspace`` (the CPU
kernels' work buffers kept on the layer's convolution/pooling plans: im2col patches, tile
and direct-convolution buffers).  A buffer is counted once, for the first layer that holds
it (views share their buffer), at its allocated size as its backend reports it
(``Backend.buffer_of``: on the CPU the 64-byte aligned allocation, on the GPU the device
allocation).  The backends allocate everything before the first step and nothing after it, so
these sums are also the peaks.
"""
import numpy as np

from ..backends.storage import host_buffer
from ..memory_check import optimizer_state_per_element
from .instrument import layer_children

KINDS = ("params", "grads", "optimizer", "activations", "workspace")


def buffer_of(thing):
    """(key, bytes) of the memory behind a backend tensor (its backend's ``buffer_of``) or a
    host array (:func:`~neonlite.backends.storage.host_buffer`)."""
    if isinstance(thing, np.ndarray):
        return host_buffer(thing)
    return thing.backend.buffer_of(thing)


def _is_tensor(value):
    return hasattr(value, "backend") and hasattr(value, "shape")


def _tensors_in(value, depth=0):
    """Backend tensors in an attribute value: a tensor, or (up to two levels) lists, tuples,
    dicts and plain helper objects holding them; layers are skipped (they count for
    themselves)."""
    if _is_tensor(value):
        yield value
    elif depth < 2 and isinstance(value, (list, tuple)):
        for item in value:
            yield from _tensors_in(item, depth + 1)
    elif depth < 2 and isinstance(value, dict):
        for item in value.values():
            yield from _tensors_in(item, depth + 1)
    elif depth < 2 and hasattr(value, "__dict__") and not hasattr(value, "fprop") \
            and type(value).__module__.startswith(("neonlite", "layers")):
        for item in vars(value).values():
            yield from _tensors_in(item, depth + 1)


def _plan_work(value):
    """The work arrays a plan keeps (``Plan.buffers()``; none for anything else)."""
    buffers = getattr(value, "buffers", None)
    if callable(buffers) and hasattr(value, "out_shape"):
        yield from (a for a in buffers() if isinstance(a, np.ndarray))


class MemoryLedger:
    """Bytes by kind for each layer of a model (see the module docstring)."""

    def __init__(self):
        self.seen = set()

    def _take(self, tensor):
        key, nbytes = buffer_of(tensor)
        if key in self.seen:
            return 0
        self.seen.add(key)
        return nbytes

    def own(self, layer, state_bytes=None):
        """``{kind: bytes}`` of what ``layer`` itself holds (not its children).
        ``state_bytes(param)``: the optimizer state to count for a parameter that has none
        yet (``describe --memory``, before any step)."""
        out = dict.fromkeys(KINDS, 0)
        own_params = getattr(layer, "own_parameters", None)
        params = [] if layer_children(layer) else layer.parameters()
        for p in params if own_params is None else own_params():
            out["params"] += self._take(p.value)
            out["grads"] += self._take(p.grad)
            if p.states:
                out["optimizer"] += sum(self._take(s) for s in p.states.values())
            elif state_bytes is not None:
                out["optimizer"] += state_bytes(p)
        for name, value in vars(layer).items():
            if name in ("be", "prev_name") or hasattr(value, "fprop"):
                continue
            for tensor in _tensors_in(value):
                out["activations"] += self._take(tensor)
            for ary in _plan_work(value):
                out["workspace"] += self._take(ary)
        return out

    def tree(self, layers, state_bytes=None, depth=0):
        """[(layer, depth, {kind: bytes} including its children)] in layer order."""
        rows = []
        for layer in layers:
            mine = self.own(layer, state_bytes)
            below = self.tree(layer_children(layer), state_bytes, depth + 1)
            for _, child_depth, child in below:
                if child_depth == depth + 1:
                    for kind in KINDS:
                        mine[kind] += child[kind]
            rows.append((layer, depth, mine))
            rows.extend(below)
        return rows


def backend_workspace_bytes(be):
    """Bytes of the work buffers the backend keeps for all layers together (GEMM and row
    scratch, the C kernels' reduction workspaces, the GPU backend's scratch tensors)."""
    return be.workspace_bytes()


def model_memory(model, optimizer=None):
    """Memory rows of an initialized ``model`` (see :meth:`MemoryLedger.tree`); with
    ``optimizer`` and parameters that have no state yet, the state it will make is counted
    from a trial update of a copy of the optimizer on a small parameter."""
    per_element = optimizer_state_per_element(optimizer, model.be) if optimizer else None
    state_bytes = None if per_element is None else (
        lambda p: int(round(per_element * int(np.prod(p.value.shape)))))
    return MemoryLedger().tree(model.layers.layers, state_bytes)
