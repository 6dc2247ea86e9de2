"""The contract every neonlite backend implements.

A backend owns tensor storage, evaluates op-trees, and runs the generic compute ops that layers
need (GEMM, convolution, pooling, normalization, softmax, random masks).  Layers talk only to a
backend; a backend never imports a layer.  Methods that need per-layer setup (convolution,
pooling) take a *plan* built once at configure time (``conv_layer``, ``pool_layer``); the fprop
and bprop calls then only run the plan.

Conventions: every tensor is batch-first; images are NHWC; filters are (R, S, C, K) = (filter
height, filter width, input channels, output channels).  Methods write into the ``out`` tensors
they are given and allocate nothing after the first call.
"""
from abc import ABC, abstractmethod

import numpy as np

from . import philox
from .optree import OpNode, OpTreeOps, broadcast_shape
from .backend_sequence import SequenceOps
from .ops.dispatch import TableOps
from .plans import ConvPlan, PoolPlan
from .storage import StorageOps
from .variants import KernelVariants
from .shared.class_indices import check_class_indices
from .blocksparse_plan import BlockSparsePlan


class Tensor(OpTreeOps):
    """A batch-first n-d array that lives on a backend.

    ``get()`` returns a host ``numpy.ndarray`` copy, ``set(ary)`` copies a host array in, slicing
    (``t[a:b]``) and ``reshape`` return views sharing storage, and ``t[:] = optree`` evaluates an
    op-tree into the tensor.
    """

    backend = None

    @property
    def shape(self):
        raise NotImplementedError

    @property
    def dtype(self):
        raise NotImplementedError

    @property
    def size(self):
        return int(np.prod(self.shape))

    @property
    def ndim(self):
        return len(self.shape)

    def __len__(self):
        return self.shape[0]

    def get(self):
        raise NotImplementedError

    def set(self, ary):
        raise NotImplementedError

    def reshape(self, *shape):
        raise NotImplementedError

    def fill(self, value):
        self[:] = value
        return self

    def __repr__(self):
        return f"{type(self).__name__}(shape={self.shape}, dtype={np.dtype(self.dtype).name})"


class Backend(TableOps, SequenceOps, StorageOps, KernelVariants, ABC):
    """Abstract backend: see the module docstring for the conventions every method follows.

    Arguments:
        batch_size (int): N, the leading dimension of every activation buffer.
        rng_seed (int or None): seeds both the host RNG (initializers, shuffling) and the
            device RNG (dropout masks); the same seed gives the same run.
        datatype: numpy dtype of activations and parameters (float32 default).
        device_id (int): which device, for backends that have several.
    """

    name = None

    def __init__(self, batch_size=128, rng_seed=None, datatype=np.float32, device_id=0):
        if not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
        self.bsz = int(batch_size)
        self.rng_seed = rng_seed
        self.dtype = np.dtype(datatype)
        self.device_id = device_id
        self.rng = np.random.default_rng(rng_seed)

    # ---- tensors ---------------------------------------------------------------------------
    @abstractmethod
    def empty(self, shape, dtype=None, name=None):
        """An uninitialized tensor of ``shape`` (dtype defaults to the backend's)."""

    def zeros(self, shape, dtype=None, name=None):
        t = self.empty(shape, dtype, name)
        t[:] = 0
        return t

    def ones(self, shape, dtype=None, name=None):
        t = self.empty(shape, dtype, name)
        t[:] = 1
        return t

    def array(self, ary, dtype=None, name=None):
        """A tensor holding a copy of host array ``ary``."""
        ary = np.asarray(ary)
        t = self.empty(ary.shape, dtype or self.dtype, name)
        t.set(ary)
        return t

    def empty_like(self, t, dtype=None):
        return self.empty(t.shape, dtype or t.dtype)

    def zeros_like(self, t, dtype=None):
        return self.zeros(t.shape, dtype or t.dtype)

    def keep(self, view):
        """``view`` (a slice made once, at allocate, and used for the layer's life), marked so
        that a backend may keep calls on it by identity; returns it.  Here nothing to mark."""
        return view

    # ---- op-trees ----------------------------------------------------------------------------
    @abstractmethod
    def execute(self, out, optree):
        """Evaluate ``optree`` (an :class:`OpNode`, tensor or scalar) into tensor ``out``."""

    def execute_multi(self, assignments):
        """Evaluate ``[(out, optree), ...]`` as ``out[:] = optree`` in order (a tree that reads
        an earlier ``out`` reads its new value), fused into one pass over memory where the
        backend can: elementwise trees whose outputs share one shape (an optimizer step that
        writes a velocity and the weights).  This default runs them one by one."""
        for out, optree in assignments:
            self.execute(out, optree)

    def assign(self, out, value):
        """``out[:] = value``: a scalar, tensor, host array or op-tree."""
        out[:] = value
        return out

    def add(self, a, b):
        return OpNode("add", a, b)

    def subtract(self, a, b):
        return OpNode("sub", a, b)

    def multiply(self, a, b):
        return OpNode("mul", a, b)

    def divide(self, a, b):
        return OpNode("div", a, b)

    def power(self, a, b):
        return OpNode("pow", a, b)

    def maximum(self, a, b):
        return OpNode("maximum", a, b)

    def minimum(self, a, b):
        return OpNode("minimum", a, b)

    def clip(self, x, low, high):
        return OpNode("minimum", OpNode("maximum", x, low), high)

    def absolute(self, x):
        return OpNode("abs", x)

    def square(self, x):
        return OpNode("sqr", x)

    def sqrt(self, x):
        return OpNode("sqrt", x)

    def rsqrt(self, x):
        return OpNode("rsqrt", x)

    def exp(self, x):
        return OpNode("exp", x)

    def log(self, x):
        return OpNode("log", x)

    def tanh(self, x):
        return OpNode("tanh", x)

    def sig(self, x):
        """The logistic function 1 / (1 + exp(-x))."""
        return OpNode("sig", x)

    def sign(self, x):
        return OpNode("sign", x)

    def erf(self, x):
        return OpNode("erf", x)

    def bf16_to_f32(self, x):
        """Widen bfloat16 bit patterns (a uint16 tensor) to float32 values."""
        return OpNode("bf16_to_f32", x)

    def f32_to_bf16(self, x):
        """Round float32 values to bfloat16 bit patterns (uint16), round-to-nearest-even."""
        return OpNode("f32_to_bf16", x)

    def sum(self, x, axis=None):
        """Sum over ``axis`` (None: every axis); the reduced axes are kept with length 1."""
        return OpNode("sum", x, axis=axis)

    def max(self, x, axis=None):
        return OpNode("max", x, axis=axis)

    def min(self, x, axis=None):
        return OpNode("min", x, axis=axis)

    def argmax(self, x, axis=None):
        return OpNode("argmax", x, axis=axis)

    def argmin(self, x, axis=None):
        return OpNode("argmin", x, axis=axis)

    def mean(self, x, axis=None):
        return OpNode("sum", x, axis=axis) * (1.0 / _reduced_count(x, axis))

    def var(self, x, axis=None):
        """Biased variance (mean of squared deviations) over ``axis``."""
        mean = self.mean(x, axis)
        return OpNode("sum", OpNode("sqr", x - mean), axis=axis) * (1.0 / _reduced_count(x, axis))

    # ---- linear algebra --------------------------------------------------------------------
    @abstractmethod
    def compound_dot(self, A, B, C, alpha=1.0, beta=0.0, transA=False, transB=False):
        """C = alpha * op(A) @ op(B) + beta * C for 2-D tensors (op transposes when asked)."""

    @abstractmethod
    def batched_dot(self, A, B, C, alpha=1.0, beta=0.0, transA=False, transB=False):
        """C[i] = alpha * op(A[i]) @ op(B[i]) + beta * C[i] for 3-D tensors (batch first)."""

    # ---- convolution and pooling -------------------------------------------------------------
    def conv_layer(self, N, C, H, W, K, R, S, pad=(0, 0), stride=(1, 1), dilation=(1, 1)):
        """A :class:`ConvPlan` for NHWC input (N, H, W, C) and filters (R, S, C, K)."""
        return ConvPlan(N, C, H, W, K, R, S, pad, stride, dilation)

    @abstractmethod
    def fprop_conv(self, plan, I, F, O, bias=None, relu=False):
        """O (N, P, Q, K) = conv(I (N, H, W, C), F (R, S, C, K)), then the epilogue: + ``bias``
        (K,) when given, then max(O, 0) when ``relu`` (a NaN stays NaN), fused into the
        convolution's own pass over O where the backend can."""

    @abstractmethod
    def bprop_conv(self, plan, F, E, grad_I, beta=0.0):
        """grad_I (N, H, W, C) = conv_transpose(E (N, P, Q, K), F) + beta * grad_I."""

    @abstractmethod
    def update_conv(self, plan, I, E, grad_F, beta=0.0):
        """grad_F (R, S, C, K) = correlation of I with E, + beta * grad_F.

        I must be the input of the latest ``fprop_conv`` with this plan, unchanged since (as in
        a training step): a backend may reuse the patches it gathered there.
        """

    def pool_layer(self, op, N, C, H, W, R, S, pad=(0, 0), stride=None):
        """A :class:`PoolPlan` for NHWC input; ``op`` is 'max' or 'avg'."""
        return PoolPlan(op, N, C, H, W, R, S, pad, stride or (R, S))

    @abstractmethod
    def fprop_pool(self, plan, I, O):
        """O (N, P, Q, C) = pool(I (N, H, W, C)); max pooling records its argmax in the plan."""

    @abstractmethod
    def bprop_pool(self, plan, E, grad_I, beta=0.0):
        """grad_I (N, H, W, C) = routes E (N, P, Q, C) back through the last fprop_pool."""

    # ---- normalization, softmax, randomness --------------------------------------------------
    @abstractmethod
    def batchnorm_moments(self, x):
        """The batch statistics of x (M, C) that synchronised batch norm combines across
        processes: ``(mean, m2)``, host float64 arrays (C,) of the per-channel mean and sum of
        squared deviations over the rows (accumulated as precisely as ``batchnorm_fprop``'s
        own; only 2C numbers leave the device)."""

    @abstractmethod
    def softmax_cross_entropy(self, logits, targets, probs, grad, scale=1.0):
        """Fused softmax + cross-entropy over the last axis of (M, K) tensors.

        Writes probs = softmax(logits) and grad = scale * (probs - targets) (targets one-hot or
        soft) and returns the summed loss -sum(targets * log(probs)) as a Python float.
        Backends whose ``index_targets`` is True also take targets (M,) int32 class indices
        (the same results as their one-hot rows; an index outside [0, K) raises IndexError
        naming its position).
        """

    #: whether ``softmax_cross_entropy`` takes int32 class-index targets
    index_targets = False

    def onehot(self, indices, out):
        """out (M, K) = the one-hot rows of integer class indices ``indices`` (M,); an index
        outside [0, K) raises IndexError naming its position."""
        idx = np.asarray(indices.get()).reshape(-1)
        check_class_indices(idx, out.shape[-1])
        host = np.zeros(out.shape, dtype=np.float32)
        host[np.arange(idx.size), idx] = 1
        out.set(host)
        return out

    @abstractmethod
    def masked_softmax(self, x, out, scale=1.0, causal=False, key_mask=None):
        """out = softmax(scale * x) over the last axis of x (B, Tq, Tk), with hidden keys.

        ``causal``: query i sees key j only when j <= i + (Tk - Tq) (the queries are the last
        Tq of the Tk positions, so keys extended by a cache work).  ``key_mask`` (N, Tk), B a
        multiple of N: a zero hides key j from every query of the slices b with
        b // (B // N) == n.  Hidden keys get probability 0; a row with every key hidden is all
        zeros.  ``out`` may be ``x``.
        """

    # ---- block-sparse plans --------------------------------------------------------------------
    def blocksparse_layer(self, layout, block_size):
        """A :class:`~neonlite.backends.blocksparse_plan.BlockSparsePlan` of ``layout`` ((R, C) or (H, R, C)
        blocks of ``block_size``, one of 8/16/32/64) and its lookup tables.  Stored block k is
        the k-th nonzero of the layout in row-major order; a weight holds it as W[k] (bs, bs).
        The block-sparse ops (``blocksparse_fprop``, ``_bprop``, ``_update``, ``_sdd``,
        ``_dsd``, ``_softmax``, ``_softmax_bprop``) take it first; they are dispatched by the
        op table (``ops/blocksparse.py`` states them)."""
        return BlockSparsePlan(layout, block_size)

    # ---- GELU fused with a bias -----------------------------------------------------------------
    # ---- rows of a table (embeddings) and layout ---------------------------------------------
    @abstractmethod
    def take_rows(self, table, ids, out):
        """out[s] = table[ids[s]] for table (V, D), ids of any shape S holding whole numbers
        (an integer or float tensor), out S + (D,).  An id outside [0, V) raises ``IndexError``
        naming the id and its position in ``ids``."""

    @abstractmethod
    def scatter_add_rows(self, grad_table, ids, rows):
        """grad_table[ids[s]] += rows[s] for grad_table (V, D), ids S, rows S + (D,).
        Deterministic: repeated ids are summed in a fixed order."""

    @abstractmethod
    def permute_axes(self, x, out, axes):
        """out = x with its axes reordered (numpy.transpose order: out.shape[i] ==
        x.shape[axes[i]]), copied into ``out`` (contiguous, or a view of a larger tensor;
        ``x`` may be a view too)."""

    @abstractmethod
    def uniform(self, out, low=0.0, high=1.0):
        """Fill ``out`` with uniform random numbers from the backend's device RNG."""

    def dropout_mask(self, mask, keep):
        """mask = (U(0,1) < keep) / keep: the scaled keep mask of inverted dropout."""
        self.uniform(mask)
        mask[:] = (mask < keep) * (1.0 / keep)
        return mask

    def example_dropout_mask(self, mask, keep, key, step, stream, first, examples=None):
        """Fill ``mask`` (contiguous; its elements read as ``examples`` rows, by default
        ``mask.shape[0]``) with the inverted-dropout masks of the global examples ``first ..``
        drawn by counter-based Philox from (key, step, stream): the stream of
        :func:`philox.example_masks`, bit for bit on every backend, whatever the batch split."""
        rows = self.example_rows(mask, examples)
        bits = philox.example_masks((rows, mask.size // rows), keep, key, step, stream, first)
        mask.set(bits.reshape(mask.shape))
        return mask

    def set_threads(self, n):
        """Run this backend's host computation on ``n`` threads (a data-parallel rank's share
        of the cores); a backend whose work is on a device ignores it."""

    def synchronize(self):
        """Wait for queued work (no-op where work is synchronous)."""

    def prefetched(self, iterator, limit=None):
        """``iterator`` (a data iterator, or None) as the training loop should consume it: a
        backend that can copy the next batch while the current one is computed wraps it (the
        GPU backend); this default returns it unchanged.  ``limit``: the batches that will be
        used per epoch (None: all)."""
        return iterator


def _reduced_count(x, axis):
    shape = x.shape if hasattr(x, "shape") and not isinstance(x, OpNode) else broadcast_shape(x)
    if axis is None:
        return int(np.prod(shape))
    axes = (axis,) if isinstance(axis, int) else axis
    return int(np.prod([shape[a] for a in axes]))
