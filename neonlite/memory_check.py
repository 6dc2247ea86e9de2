"""Refusing a network that cannot fit in memory before allocating any of it.

A size typo (``nout: 3000000000``, ``fshape: [3000, 3000, 64]``, ``max_len: 1e9``,
``batchsize: 1000000``) would otherwise make the first allocation take all memory or fail
deep in numpy.  :func:`check_network_fits` counts, from the configured shapes alone (nothing
is allocated yet), what every leaf layer will hold:

* ``parameters``: the shapes each layer's ``param_shapes()`` promises;
* ``gradients``: one of each parameter;
* ``optimizer state``: per parameter element, what a trial update of a copy of the optimizer
  makes (:func:`optimizer_state_per_element`; none when no optimizer is given);
* ``activations``: the output and, as large, the error buffers for one batch (the next
  layer's delta has the output's shape);
* ``workspace``: a CPU convolution's im2col patch matrix (the images per chunk its plan
  chose x P x Q x R x S x C), the largest work array a layer plan may keep,

and compares the sum with the memory available: the backend's ``memory_bytes()`` where it
has one (a GPU's), else what this process may still take (:func:`neonlite.host_memory.
available_bytes`: MemAvailable, the address-space limit, the cgroup limit).  The refusal is
one line naming the largest consumer (layer and kind) and the totals by kind.
"""
import copy
import math

import numpy as np

from .host_memory import available_bytes, describe_bytes
from .layers.layer import Parameter

KINDS = ("parameters", "gradients", "optimizer state", "activations", "workspace")


class NetworkTooLarge(ValueError):
    """A network whose buffers cannot fit in memory; the message says where and how much."""


def planned_parameter_shapes(leaf):
    """The parameter shapes configured layer ``leaf`` will allocate (``param_shapes()``)."""
    return [tuple(int(s) for s in shape) for shape in leaf.param_shapes()]


def _count(shape):
    return math.prod(float(s) for s in shape)


def _workspace_elements(leaf):
    """Elements of the largest work array the layer's plan may keep: a CPU convolution's
    im2col patch matrix (per_chunk*P*Q, R*S*C) (its plan chooses ``per_chunk``, the images
    per chunk, at configure time); none for other layers and plans."""
    plan = getattr(leaf, "plan", None)
    fields = ("per_chunk", "P", "Q", "R", "S", "C")
    if plan is None or not all(hasattr(plan, f) for f in fields):
        return 0.0
    return math.prod(float(getattr(plan, f)) for f in fields)


def leaf_bytes(leaf, bsz, itemsize, state_per_element=0.0):
    """``{kind: bytes}`` configured layer ``leaf`` will hold for batches of ``bsz``."""
    params = sum(_count(s) for s in planned_parameter_shapes(leaf)) * itemsize
    outputs = _count(leaf.out_shape) * bsz * itemsize if leaf.out_shape is not None else 0.0
    return {"parameters": params, "gradients": params,
            "optimizer state": state_per_element * params / itemsize,
            "activations": 2 * outputs,
            "workspace": _workspace_elements(leaf) * itemsize}


def check_network_fits(leaves, be, optimizer=None, extra=None):
    """Raise :class:`NetworkTooLarge` when what ``leaves`` (configured layers) will allocate
    for a batch of ``be.bsz`` (see the module docstring), plus ``extra`` ({what: bytes},
    e.g. the data iterators' batch buffers), exceeds the memory available; the message names
    the largest consumer.  Nothing is allocated."""
    limit = getattr(be, "memory_bytes", available_bytes)()
    if not limit:
        return
    try:
        itemsize = np.dtype(be.dtype).itemsize
    except TypeError:
        itemsize = 2
    per_element = optimizer_state_per_element(optimizer, be) if optimizer is not None else 0.0
    rows = [(leaf, leaf_bytes(leaf, be.bsz, itemsize, per_element)) for leaf in leaves]
    totals = {kind: sum(row[kind] for _, row in rows) for kind in KINDS}
    extra = extra or {}
    total = sum(totals.values()) + sum(extra.values())
    if total <= limit:
        return
    parts = ", ".join(f"{kind} {describe_bytes(totals[kind])}" for kind in KINDS
                      if totals[kind])
    parts += "".join(f", data batches {describe_bytes(size)}" for size in extra.values())
    leaf, kind, size = max(((leaf, kind, row[kind]) for leaf, row in rows for kind in KINDS),
                           key=lambda item: item[2])
    what, most = max(extra.items(), key=lambda item: item[1], default=(None, 0))
    if most > size:
        raise NetworkTooLarge(f"{what}: need {describe_bytes(most)} for a batch of "
                              f"{be.bsz:,}; the run needs {describe_bytes(total)} ({parts}), "
                              f"more than the {describe_bytes(limit)} of memory available "
                              f"here (lower the batch size)")
    where = getattr(leaf, "_config_path", None)
    name = f"{where} ({leaf.name})" if where else f"layer '{leaf.name}'"
    raise NetworkTooLarge(f"{name}: its {_what(leaf, kind, be.bsz)} need "
                          f"{describe_bytes(size)}; the network needs "
                          f"{describe_bytes(total)} ({parts}) for a batch of {be.bsz:,}, "
                          f"more than the {describe_bytes(limit)} of memory available here "
                          f"(a size typo?)")


def _what(leaf, kind, bsz):
    if kind in ("parameters", "gradients", "optimizer state"):
        shapes = [str(s) for s in planned_parameter_shapes(leaf)]
        more = f" and {len(shapes) - 3} more" if len(shapes) > 3 else ""
        return f"{kind} {', '.join(shapes[:3])}{more}"
    if kind == "activations":
        return f"output {tuple(leaf.out_shape)} and error buffers for a batch of {bsz:,}"
    return "convolution workspace (im2col patches)"


def optimizer_state_per_element(optimizer, be):
    """Bytes of optimizer state per parameter element, found by running one update of a
    copy of ``optimizer`` on a throwaway 64-element parameter (the real parameters and the
    optimizer are untouched)."""
    trial = copy.deepcopy(optimizer)
    holder = type("TrialLayer", (), {"name": "trial"})()
    p = Parameter(holder, "W", be.zeros((64,)), be.zeros((64,)))
    trial.optimize([p], 0)
    return sum(s.size * np.dtype(s.dtype).itemsize for s in p.states.values()) / 64.0
