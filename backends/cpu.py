"""The CPU backend: tensors are numpy arrays and GEMMs go to numpy's BLAS.

Convolution patch gathering, pooling, normalization, softmax-cross-entropy and elementwise
op-trees run as compiled C kernels (``cpu_kernels``, ``cpu_optree``: C + OpenMP through cffi,
built on first use) for float32 and float64; the vectorized numpy implementations
(``numpy_conv``, ``numpy_norm``, ``numpy_ops``) are the reference, and run every case the
kernels do not take (float16, non-contiguous views, a machine without a C compiler).
"""
import numpy as np

from . import numpy_conv, numpy_norm, numpy_rows
from .backend import Backend, Tensor
from .cpu_attention import CPUAttentionMixin
from .cpu_blocksparse import CPUBlockSparseMixin
from .cpu_kernels import CPUKernels
from .cpu_lrn import CPULRNMixin
from .cpu_optree import OpTreeMachine
from .cpu_recurrent import CPURecurrentMixin
from .cpu_threads import set_cpu_threads
from .cpu_ufunc import run_ufuncs
from .numpy_ops import evaluate
from .optree import OpNode


class CPUTensor(Tensor):
    """A tensor backed by a numpy array (``_ary``); slices and reshapes are numpy views."""

    __slots__ = ("_ary", "backend", "name")

    def __init__(self, backend, ary, name=None):
        self.backend = backend
        self._ary = ary
        self.name = name

    @property
    def shape(self):
        return self._ary.shape

    @property
    def dtype(self):
        return self._ary.dtype

    @property
    def size(self):
        return self._ary.size

    def get(self):
        return self._ary.copy()

    def set(self, ary):
        ary = np.asarray(ary)
        if ary.shape != self.shape and ary.size != self.size:
            raise ValueError(f"cannot set a tensor of shape {self.shape} from an array of shape "
                             f"{ary.shape}")
        np.copyto(self._ary, ary.reshape(self.shape), casting="unsafe")
        return self

    def reshape(self, *shape):
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        view = self._ary.reshape(shape)
        if not np.may_share_memory(view, self._ary):  # a copy is new memory
            raise ValueError(f"reshape of a non-contiguous {self.shape} view to {shape} would copy")
        return CPUTensor(self.backend, view)

    @property
    def T(self):
        return CPUTensor(self.backend, self._ary.T)

    def __getitem__(self, index):
        return CPUTensor(self.backend, self._ary[_index(index)])

    def __setitem__(self, index, value):
        self.backend._evaluate(self._ary[_index(index)], value)

    def __array__(self, dtype=None, copy=None):
        return self._ary if dtype is None else self._ary.astype(dtype)


def _index(index):
    if isinstance(index, CPUTensor):
        return index._ary
    return index


def _ary(t):
    return t._ary


ALIGN_BYTES = 64


def aligned_empty(shape, dtype):
    """An uninitialised C-contiguous array of ``shape`` whose data starts on a 64-byte boundary
    (a cache line, one AVX-512 vector).  numpy aligns only to 16 bytes; the C kernels' vector
    loads and stores of rows of output channels then straddle cache lines, which was measured
    to cost 3-12% of a 5x5 convolution pass here."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.empty(nbytes + ALIGN_BYTES, dtype=np.uint8)
    start = -raw.ctypes.data % ALIGN_BYTES
    return raw[start:start + nbytes].view(dtype).reshape(shape)


class CPUBackend(CPUAttentionMixin, CPULRNMixin, CPURecurrentMixin, CPUBlockSparseMixin,
                 Backend):
    """numpy-based backend (see the module docstring).  ``datatype`` may be float16, float32 or
    float64 (float64 is the one gradient checks use)."""

    name = "cpu"

    def __init__(self, batch_size=128, rng_seed=None, datatype=np.float32, device_id=0):
        super().__init__(batch_size, rng_seed, datatype, device_id)
        if self.dtype not in (np.float16, np.float32, np.float64):
            raise ValueError(f"the cpu backend stores float16, float32 or float64, not "
                             f"{self.dtype.name}")
        self._device_rng = np.random.default_rng(None if rng_seed is None else rng_seed + 1)
        self.kernels = CPUKernels()
        self._machine = OpTreeMachine(self.kernels)
        self._gemm_scratch = {}
        self._row_scratch = {}

    def prepare_kernels(self):
        """Compile the C kernels of this backend's data type that are not cached yet (one
        notice on stderr); ``Model.fit`` calls it before the first epoch."""
        self.kernels.prepare(self.dtype)

    def _evaluate(self, out, value):
        """out (ndarray)[...] = value (op-tree, tensor, array or scalar)."""
        if not (isinstance(value, OpNode) and (
                run_ufuncs(out, value, lambda node: self._machine.leading_sum(node, out.dtype))
                or self._leading_sum_into(out, value) or self._machine.run(out, value))):
            evaluate(out, value)
        return out

    def _leading_sum_into(self, out, tree):
        """out[...] = sum(t, axis=leading axes) (a bias gradient at the root of a tree) by the
        machine's column sum; False when it does not take the tree."""
        if tree.op != "sum" or out.dtype not in (np.float32, np.float64):
            return False
        total = self._machine.leading_sum(tree, out.dtype)
        if total is None or total.size != out.size:
            return False
        np.copyto(out, total.reshape(out.shape))
        return True

    def execute_multi(self, assignments):
        pairs = [(out._ary, tree) for out, tree in assignments]
        if not self._machine.run_multi(pairs):
            for out, tree in pairs:
                self._evaluate(out, tree)

    def empty(self, shape, dtype=None, name=None):
        shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(int(s) for s in shape)
        return CPUTensor(self, aligned_empty(shape, dtype or self.dtype), name)

    def array(self, ary, dtype=None, name=None):
        ary = np.asarray(ary)
        out = aligned_empty(ary.shape, dtype or self.dtype)
        out[...] = ary
        return CPUTensor(self, out, name)

    def execute(self, out, optree):
        self._evaluate(out._ary, optree)
        return out

    def compound_dot(self, A, B, C, alpha=1.0, beta=0.0, transA=False, transB=False):
        a = A._ary.T if transA else A._ary
        b = B._ary.T if transB else B._ary
        _gemm_into(C._ary, a, b, alpha, beta, self._gemm_scratch, self.kernels.gemm.matmul)
        return C

    def batched_dot(self, A, B, C, alpha=1.0, beta=0.0, transA=False, transB=False):
        a = np.swapaxes(A._ary, -1, -2) if transA else A._ary
        b = np.swapaxes(B._ary, -1, -2) if transB else B._ary
        _gemm_into(C._ary, a, b, alpha, beta, self._gemm_scratch, self.kernels.gemm.matmul)
        return C

    def fprop_conv(self, plan, I, F, O, bias=None, relu=False):
        b = None if bias is None else bias._ary
        if not self.kernels.fprop_conv(plan, I._ary, F._ary, O._ary, b, relu):
            numpy_conv.fprop_conv(plan, I._ary, F._ary, O._ary, b, relu)

    def bprop_conv(self, plan, F, E, grad_I, beta=0.0):
        if not self.kernels.bprop_conv(plan, F._ary, E._ary, grad_I._ary, beta):
            numpy_conv.bprop_conv(plan, F._ary, E._ary, grad_I._ary, beta)

    def update_conv(self, plan, I, E, grad_F, beta=0.0):
        if not self.kernels.update_conv(plan, I._ary, E._ary, grad_F._ary, beta):
            numpy_conv.update_conv(plan, I._ary, E._ary, grad_F._ary, beta)

    def fprop_pool(self, plan, I, O):
        if not self.kernels.fprop_pool(plan, I._ary, O._ary):
            numpy_conv.fprop_pool(plan, I._ary, O._ary)

    def bprop_pool(self, plan, E, grad_I, beta=0.0):
        if not self.kernels.bprop_pool(plan, E._ary, grad_I._ary, beta):
            numpy_conv.bprop_pool(plan, E._ary, grad_I._ary, beta)

    def batchnorm_fprop(self, x, gamma, beta, y, xhat, mean, invstd, running_mean, running_var,
                        eps=1e-5, momentum=0.9, inference=False, relu=False):
        arrays = tuple(map(_ary, (x, gamma, beta, y, xhat, mean, invstd, running_mean,
                                  running_var)))
        if not self.kernels.batchnorm_fprop(*arrays, eps, momentum, inference, relu):
            numpy_norm.batchnorm_fprop(*arrays, eps, momentum, inference)
            if relu:
                np.maximum(arrays[3], 0, out=arrays[3])

    def set_threads(self, n):
        """OpenMP (the C kernels, MKL), OpenBLAS and the split GEMMs on ``n`` threads."""
        set_cpu_threads(n)
        use_cores = getattr(self.kernels.gemm, "use_cores", None)
        if use_cores is not None:
            use_cores(n)

    def batchnorm_moments(self, x):
        C = x.shape[-1]
        mean, m2 = np.empty(C), np.empty(C)
        if self.kernels.batchnorm_moments(x._ary, mean, m2):
            return mean, m2
        return numpy_norm.batchnorm_moments(x._ary)

    def batchnorm_apply(self, x, gamma, beta, y, xhat, mean, invstd, relu=False):
        arrays = tuple(map(_ary, (x, gamma, beta, y, xhat, mean, invstd)))
        if not self.kernels.batchnorm_apply(*arrays, relu):
            numpy_norm.batchnorm_apply(*arrays)
            if relu:
                np.maximum(arrays[3], 0, out=arrays[3])

    def batchnorm_bprop(self, dy, xhat, invstd, gamma, dx, dgamma, dbeta, beta_acc=0.0, y=None):
        arrays = tuple(map(_ary, (dy, xhat, invstd, gamma, dx, dgamma, dbeta)))
        mask = None if y is None else y._ary
        if not self.kernels.batchnorm_bprop(*arrays, beta_acc, mask):
            if mask is not None:
                arrays = (arrays[0] * (mask > 0),) + arrays[1:]
            numpy_norm.batchnorm_bprop(*arrays, beta_acc)

    def layernorm_fprop(self, x, gamma, beta, y, xhat, invstd, eps=1e-5, residual=None,
                        total=None):
        arrays = tuple(map(_ary, (x, gamma, beta, y, xhat, invstd)))
        joined = (None, None) if residual is None else (_ary(residual), _ary(total))
        if not self.kernels.layernorm_fprop(*arrays, eps, *joined):
            numpy_norm.layernorm_fprop(*arrays, eps, *joined)

    def layernorm_bprop(self, dy, xhat, invstd, gamma, dx, dgamma, dbeta, residual=None):
        arrays = tuple(map(_ary, (dy, xhat, invstd, gamma, dx, dgamma, dbeta)))
        res = None if residual is None else _ary(residual)
        if not self.kernels.layernorm_bprop(*arrays, res):
            numpy_norm.layernorm_bprop(*arrays, res)

    def softmax(self, x, out, axis=-1):
        if not self.kernels.softmax(x._ary, out._ary, axis):
            numpy_norm.softmax(x._ary, out._ary, axis)

    index_targets = True

    def onehot(self, indices, out):
        idx, rows = indices._ary.reshape(-1), out._ary
        if idx.size and (idx.min() < 0 or idx.max() >= rows.shape[-1]):
            numpy_norm.check_class_indices(idx, rows.shape[-1])
        rows.fill(0)
        np.put_along_axis(rows, idx[:, None].astype(np.intp, copy=False), 1, axis=-1)
        return out

    def softmax_cross_entropy(self, logits, targets, probs, grad, scale=1.0):
        arrays = tuple(map(_ary, (logits, targets, probs, grad)))
        loss = self.kernels.softmax_cross_entropy(*arrays, scale)
        if loss is None:
            loss = numpy_norm.softmax_cross_entropy(*arrays, scale)
        return loss

    def masked_softmax(self, x, out, scale=1.0, causal=False, key_mask=None):
        mask = None if key_mask is None else key_mask._ary
        if not self.kernels.masked_softmax(x._ary, out._ary, scale, causal, mask):
            numpy_norm.masked_softmax(x._ary, out._ary, scale, causal, mask)

    def masked_softmax_bprop(self, y, dy, dx, scale=1.0):
        if not self.kernels.masked_softmax_bprop(y._ary, dy._ary, dx._ary, scale):
            numpy_norm.masked_softmax_bprop(y._ary, dy._ary, dx._ary, scale)

    def gelu(self, x, out, bias=None, pre=None, approximate="none"):
        if self.kernels.gelu(x._ary, out._ary, None if bias is None else bias._ary,
                             None if pre is None else pre._ary, approximate):
            return out
        return super().gelu(x, out, bias, pre, approximate)

    def gelu_bprop(self, x, dy, dx, dbias=None, approximate="none", y=None):
        if self.kernels.gelu_bprop(x._ary, dy._ary, dx._ary,
                                   None if dbias is None else dbias._ary, approximate,
                                   None if y is None else y._ary):
            return dx
        return super().gelu_bprop(x, dy, dx, dbias, approximate)

    def take_rows(self, table, ids, out):
        idx = self._row_indices(ids._ary, table.shape[0])
        if not self.kernels.take_rows(table._ary, idx, out._ary):
            numpy_rows.take_rows(table._ary, ids._ary, out._ary)

    def scatter_add_rows(self, grad_table, ids, rows):
        idx = self._row_indices(ids._ary, grad_table.shape[0])
        if not self.kernels.scatter_add_rows(grad_table._ary, idx, rows._ary):
            numpy_rows.scatter_add_rows(grad_table._ary, ids._ary, rows._ary)

    def _row_indices(self, ids, nrows):
        """``ids`` (ndarray of any shape S: integers, or floats holding whole numbers) as the
        int64 row numbers (n,) = ids.reshape(-1) that ``numpy_rows.row_indices`` gives, checked
        to lie in [0, nrows), but written into buffers kept per (S, dtype), so an embedding's
        look-up and gradient allocate nothing from the second step on.  The result is valid
        until the next call.  A bad id raises ``row_indices``'s IndexError, which names it."""
        key = (ids.shape, ids.dtype)
        found = self._row_scratch.get(key)
        if found is None:
            whole = ids.dtype.kind == "f"  # floats must be whole numbers: trunc(ids) == ids
            found = self._row_scratch[key] = (
                np.empty(ids.shape, np.int64),
                np.empty(ids.shape, ids.dtype) if whole else None,
                np.empty(ids.shape, np.bool_) if whole else None)
        idx, truncated, same = found
        np.copyto(idx, ids, casting="unsafe")  # the cast of ids.astype(np.intp)
        ok = idx.size == 0 or (idx.min() >= 0 and idx.max() < nrows)
        if ok and truncated is not None:
            np.trunc(ids, out=truncated)
            ok = np.equal(truncated, ids, out=same).all()
        if not ok:
            return numpy_rows.row_indices(ids, nrows).reshape(-1)  # raises, naming the id
        return idx.reshape(-1)

    def permute_axes(self, x, out, axes):
        if not self.kernels.permute_axes(x._ary, out._ary, axes):
            np.copyto(out._ary, np.transpose(x._ary, axes))

    def uniform(self, out, low=0.0, high=1.0):
        ary = out._ary
        if ary.dtype in (np.float32, np.float64) and ary.flags.c_contiguous:
            self._device_rng.random(out=ary, dtype=ary.dtype)
        else:
            ary[...] = self._device_rng.random(out.shape, dtype=np.float64
                                               if out.dtype == np.float64 else np.float32)
        if (low, high) != (0.0, 1.0):
            out._ary *= high - low
            out._ary += low
        return out

    def device_rng_state(self):
        """The device RNG's state as a JSON-able dict (for checkpoints)."""
        return self._device_rng.bit_generator.state

    def set_device_rng_state(self, state):
        self._device_rng.bit_generator.state = state


def _gemm_into(c, a, b, alpha, beta, scratch, matmul):
    """c = alpha * a @ b + beta * c, the product by ``matmul(a, b, out)``: in one call where the
    GEMM takes the scales (``matmul_scaled`` of MKL, c not overlapping a or b); else, with
    beta != 0, the product goes through a buffer kept in ``scratch`` (keyed by shape and dtype),
    so repeated calls allocate nothing."""
    scaled = getattr(getattr(matmul, "__self__", None), "matmul_scaled", None)
    if scaled is not None and (beta == 0.0 or not (
            np.may_share_memory(c, a) or np.may_share_memory(c, b))):
        if scaled(a, b, c, alpha, beta):
            return
    if beta == 0.0:
        matmul(a, b, c)
        if alpha != 1.0:
            c *= alpha
        return
    key = (c.shape, c.dtype)
    product = scratch.get(key)
    if product is None:
        product = scratch[key] = np.empty(c.shape, dtype=c.dtype)
    matmul(a, b, product)
    if alpha != 1.0:
        product *= alpha
    if beta != 1.0:
        c *= beta
    c += product
