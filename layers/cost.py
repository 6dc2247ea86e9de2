"""GeneralizedCost: applies a cost function to the model's output and starts bprop."""
import numpy as np

from ..backends.shared.bfloat16 import holds_integers
from .activation import Activation
from .layer import ShapeError, steps_view


class GeneralizedCost:
    """Wraps a cost (``neonlite.transforms``) with its delta buffer (N,) + output shape.

    If the model's last leaf layer is the activation the cost fuses with (Softmax for
    CrossEntropyMulti, Logistic for CrossEntropyBinary), the gradient is taken with respect to
    that activation's input in one fused step and the activation passes it through.

    Targets are (N,) + output shape (one-hot, soft or real-valued), or, for an output whose
    last axis holds K classes, integer class indices (N,) + output shape[:-1] (int32; e.g. a
    classifier's (N,), a language model's (N, T)): K times less memory than one-hot rows.
    CrossEntropyMulti fused with its Softmax takes the indices directly where the backend's
    kernel does (``index_targets``); every other case expands them into a one-hot buffer first.
    An index outside [0, K) raises IndexError naming its position.

    Outputs of a model of sequences (N, T', ...) shorter than the T it was built for are
    costed on views of that length of the delta and one-hot buffers (made once per length).

    A cost with an ``ignore_index`` (:class:`~neonlite.transforms.CrossEntropyMulti`) takes
    class-index targets only; rows whose target is that index add nothing to the loss or the
    gradient, and both are averaged over the other rows (:meth:`_cost_ignoring`).
    """

    def __init__(self, costfunc, name=None):
        self.costfunc = costfunc
        self.name = name or "cost"
        self.fused_layer = None

    def initialize(self, last_leaf, out_shape, be):
        self.be = be
        self.out_shape = tuple(out_shape)
        self.deltas = be.zeros((be.bsz,) + self.out_shape)
        self.work = be.zeros((1,) * (len(self.out_shape) + 1))
        self._onehot = None
        self._views = {}
        self.ignore_index = getattr(self.costfunc, "ignore_index", None)
        if self.ignore_index is not None:
            rows = be.bsz * int(np.prod(self.out_shape[:-1], dtype=np.int64))
            self._kept_idx = be.zeros((rows,), dtype=np.int32)
            self._keep = be.zeros((rows, 1))
        fuses = self.costfunc.fuses_with
        fused = (fuses is not None and isinstance(last_leaf, Activation)
                 and isinstance(last_leaf.transform, fuses))
        if isinstance(last_leaf, Activation):
            last_leaf.fused_with_cost = fused
        self.fused_layer = last_leaf if fused else None

    def check_targets(self, target_shape):
        if tuple(target_shape) != self.out_shape and \
                not (self.out_shape and tuple(target_shape) == self.out_shape[:-1]):
            raise ShapeError(f"the data set's targets have shape {tuple(target_shape)} per "
                             f"example but the model's output has shape {self.out_shape}")

    def _dense(self, y, t):
        """``t`` as dense targets of y's shape: class indices expanded into a one-hot buffer
        (made once), anything else as it is."""
        if not holds_integers(t.dtype):
            return t
        if tuple(t.shape) != tuple(y.shape[:-1]):
            raise ShapeError(f"class-index targets have shape {tuple(t.shape)}, but the "
                             f"outputs {tuple(y.shape)} need {tuple(y.shape[:-1])}")
        if self._onehot is None:
            self._onehot = self.be.zeros((self.be.bsz,) + self.out_shape)
        onehot = self._at_length(self._onehot, y)
        k = y.shape[-1]
        self.be.onehot(t.reshape(t.size), onehot.reshape(t.size, k))
        return onehot

    def _at_length(self, full, y):
        """Buffer ``full`` (bsz,) + out_shape as a view of y's shape: itself, or for outputs
        of fewer sequence steps its view of their length (made once per length)."""
        if tuple(full.shape) == tuple(y.shape):
            return full
        shape = tuple(y.shape)
        if len(shape) < 3 or shape[0] != full.shape[0] or shape[2:] != tuple(full.shape[2:]) \
                or not 1 <= shape[1] <= full.shape[1]:
            raise ShapeError(f"{self.name}: the outputs have shape {shape}, but the cost was "
                             f"set up for {tuple(full.shape)} (or fewer sequence steps)")
        key = (id(full), shape[1])
        view = self._views.get(key)
        if view is None:
            view = self._views[key] = steps_view(self.be, full, shape[0], full.shape[1],
                                                 shape[1])
        return view

    def cost(self, y, t):
        """The cost of outputs y against targets t, as a Python float."""
        if self.ignore_index is not None:
            return self._cost_ignoring(y, t, gradient=False)[0]
        return self.costfunc.cost(self.be, y, self._dense(y, t), self.work)

    def cost_and_errors(self, y, t):
        """(cost as a float, delta tensor to feed bprop) for one batch."""
        if self.ignore_index is not None:
            return self._cost_ignoring(y, t)
        if self.fused_layer is not None:
            index = holds_integers(t.dtype)
            if index and not (self.be.index_targets and self.costfunc.takes_indices):
                t = self._dense(y, t)
            elif index and tuple(t.shape) != tuple(y.shape[:-1]):
                raise ShapeError(f"class-index targets have shape {tuple(t.shape)}, but the "
                                 f"outputs {tuple(y.shape)} need {tuple(y.shape[:-1])}")
            deltas = self._at_length(self.deltas, y)
            value = self.costfunc.fused(self.be, self.fused_layer.x, y, t, deltas)
            return (self.cost(y, t) if value is None else value), deltas
        t = self._dense(y, t)
        deltas = self._at_length(self.deltas, y)
        self.costfunc.bprop(self.be, y, t, deltas)
        return self.cost(y, t), deltas

    def _kept_targets(self, t, rows):
        """(class indices (rows,) with the ignored ones as 0, keep (rows, 1) 1 at the others,
        the count of the others) from class-index targets t."""
        host = np.asarray(t.get()).reshape(rows)
        keep = host != self.ignore_index
        idx = self._at_rows(self._kept_idx, rows)
        kept = self._at_rows(self._keep, rows)
        idx.set(np.where(keep, host, 0))
        kept.set(keep)
        return idx, kept, int(np.count_nonzero(keep))

    def _at_rows(self, full, rows):
        """The view of the first ``rows`` rows of ``full`` (made once per count)."""
        if full.shape[0] == rows:
            return full
        key = (id(full), rows)
        view = self._views.get(key)
        if view is None:
            view = self._views[key] = self.be.keep(full[:rows])
        return view

    def _cost_ignoring(self, y, t, gradient=True):
        """The cost and gradient over the rows whose target is not ``ignore_index``: the
        one-hot targets of the others, zero rows for those, and both sums divided by the
        count of the others (0 when there is none)."""
        if not holds_integers(t.dtype):
            raise ShapeError(f"{self.name}: ignore_index={self.ignore_index} takes class-index "
                             f"targets (int32), got targets of dtype {np.dtype(t.dtype)}")
        if tuple(t.shape) != tuple(y.shape[:-1]):
            raise ShapeError(f"class-index targets have shape {tuple(t.shape)}, but the "
                             f"outputs {tuple(y.shape)} need {tuple(y.shape[:-1])}")
        be, k, rows = self.be, y.shape[-1], t.size
        idx, keep, count = self._kept_targets(t, rows)
        if self._onehot is None:
            self._onehot = be.zeros((be.bsz,) + self.out_shape)
        onehot = self._at_length(self._onehot, y).reshape(rows, k)
        be.onehot(idx, onehot)
        onehot[:] = onehot * keep
        deltas = self._at_length(self.deltas, y)
        d2, scale = deltas.reshape(rows, k), (1.0 / count if count else 0.0)
        if not gradient:
            pass
        elif self.fused_layer is not None:
            be.softmax_cross_entropy(self.fused_layer.x.reshape(rows, k), onehot,
                                     y.reshape(rows, k), d2, 1.0)
            d2[:] = d2 * keep * scale
        else:
            self.costfunc.bprop(be, y, onehot.reshape(y.shape), deltas)
            d2[:] = d2 * (rows * scale)
        cost = self.costfunc.cost(be, y, onehot.reshape(y.shape), self.work)
        return cost * rows * scale, deltas

    def get_description(self):
        return {"type": "GeneralizedCost", "config": {"costfunc": self.costfunc.get_description()}}
