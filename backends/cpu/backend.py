"""The CPU backend (``cpu``): tensors are numpy arrays (``tensor.py``); GEMMs go to MKL's CBLAS
where the ``mkl`` wheel is installed, else to numpy's BLAS (``blas.py``, ``mkl_blas.py``).

Convolution, pooling, normalization, softmax and cross-entropy, GELU, attention, rows,
block-sparse products, LRN, recurrent gate steps and elementwise op-trees run as compiled C
kernels (C + OpenMP through cffi, built on first use: ``build.py``) for float32 and float64,
one module per section of the backend contract; the numpy definitions of
``backends/reference/`` run every case the kernels do not take (float16, non-contiguous views,
a machine without a C compiler).

bfloat16 (``datatype="bf16"``, or ``dtype="bf16"`` for one tensor) is storage: tensors hold
uint16 bit patterns and every op runs its float32 implementation between a widening and a
narrowing (``bf16_boundary.py``, driven by the op table; assignments and op-trees in
``bf16_assign.py``), the products by ``dot_bf16`` (``bf16.py``: bf16 arithmetic where this
machine pays for it, ``bf16_choice.py``).  ``NEONLITE_BF16=off`` refuses it.
"""
import inspect

import numpy as np

from ..half_precision import CPU_F16_SLOWDOWN
from ..backend import Backend
from ..ops import OPS
from ..ops.table import CALL, PLAN
from ..optree import OpNode, assignment_error
from ..reference.optree import evaluate
from ..shared.bfloat16 import as_dtype, is_bf16
from ..storage import array_is_finite, host_buffer
from ..variants import CONV_METHODS, GEMM_METHODS, conv_algorithm
from .arena import make_cpu_arena
from .attention import RUNS as ATTENTION_RUNS, CPUAttentionCalls
from . import bf16_choice
from .bf16 import CPUBf16Ops
from .bf16_assign import assign_bf16
from .bf16_boundary import Bf16Boundary, boundary_methods, is_bf16_tensor
from .bf16_packed import shared_area_arrays
from .blas import MAX_GEMM_CALLS, CPUBlasOps
from .blocksparse import CALLS as BLOCKSPARSE_CALLS, CPUBlockSparsePlan
from . import conv_bf16
from .conv import CPUConvOps
from .kept_calls import KeptCalls
from .build import KernelModules
from .norm import CPUNormOps
from .optree import OpTreeMachine
from .pool import CPUPoolOps
from .recurrent import CPURecurrentOps
from .rows import CPURowOps
from .softmax import CPUSoftmaxOps
from .tensor import CPUTensor, aligned_empty, all_kept
from .threads import set_cpu_threads
from .ufunc import run_ufuncs

#: op name -> the C call of a dispatched row whose kernel takes its plan's arguments
#: (``call(module, real, plan, *arrays, *scalars)`` -> (C function, arguments)), from the
#: families' section files
PLAN_CALLS = {**BLOCKSPARSE_CALLS}
#: op name -> the section class whose ``run(op, operands, scalars)`` (one instance per
#: backend, made on its ``KernelModules``) runs a dispatched row whose kernel has
#: ``arguments=CALL``, answering False for a case its kernels do not take
OP_CALLS = dict.fromkeys(ATTENTION_RUNS, CPUAttentionCalls)


def _not_a_tensor(op, operands):
    """The TypeError of a table-op call given an expression (or another non-tensor) where
    the row takes a tensor."""
    for o, t in zip(op.operands, operands):
        if t is not None and not isinstance(t, CPUTensor):
            return op.expression_error(operands) or TypeError(
                f"{op.name}: {o.name} is a {type(t).__name__}, expected a tensor")
    return TypeError(f"{op.name}: every operand must be a tensor")


def check_bf16_on():
    """ValueError where ``NEONLITE_BF16=off`` turns bfloat16 on the CPU off."""
    if bf16_choice.requested() == "off":
        raise ValueError(f"the cpu backend's bfloat16 is off ({bf16_choice.ENV}=off); unset "
                         f"{bf16_choice.ENV} (this machine's measured choice) or set it to "
                         f"storage or compute to store tensors in bfloat16")


class CPUBackend(CPUConvOps, CPUPoolOps, CPUNormOps, CPUSoftmaxOps, CPURowOps,
                 CPUBlasOps, CPURecurrentOps,
                 CPUBf16Ops, Backend):
    """numpy-based backend (see the module docstring).  ``datatype`` may be float32 or float64
    (float64 is the one gradient checks use), bfloat16 (``"bf16"``: storage, float32
    arithmetic; refused with ``NEONLITE_BF16=off``), or float16 with ``numpy_float16=True``
    only: numpy's slow reference path of mixed precision."""

    name = "cpu"

    def __init__(self, batch_size=128, rng_seed=None, datatype=np.float32, device_id=0,
                 numpy_float16=False):
        datatype = as_dtype(datatype)
        super().__init__(batch_size, rng_seed, datatype, device_id)
        #: True once this backend has made a bfloat16 tensor (its ops then look for them)
        self.bf16_made = is_bf16(self.dtype)
        if self.bf16_made:
            check_bf16_on()
        elif self.dtype not in (np.float16, np.float32, np.float64):
            raise ValueError(f"the cpu backend stores float16, float32, float64 or bfloat16 "
                             f"('bf16'), not {self.dtype.name}")
        if self.dtype == np.float16 and not numpy_float16:
            raise ValueError(f"the cpu backend computes in float32 and float64: its C kernels "
                             f"are compiled for those, and numpy emulates float16 about "
                             f"{CPU_F16_SLOWDOWN} times slower than float32; use float32, "
                             f"float16 on the gpu backend, or numpy_float16=True for numpy's "
                             f"slow reference path")
        self._device_rng = np.random.default_rng(None if rng_seed is None else rng_seed + 1)
        self.kernels = KernelModules()
        self._machine = OpTreeMachine(self.kernels)
        self._gemm_scratch = {}
        self._gemm_calls = KeptCalls(MAX_GEMM_CALLS)
        self._row_scratch = {}
        self._sections = {cls: cls(self.kernels) for cls in set(OP_CALLS.values())}
        self._op_calls = {name: self._sections[cls].run for name, cls in OP_CALLS.items()}
        self._sections[CPUAttentionCalls].compute = self.bf16_attention_compute
        self.bf16_boundary = Bf16Boundary(self)

    def forget_prepared(self):
        """Drop every prepared kernel call, work array and table the backend keeps between
        calls (GEMM calls, the sections' kept calls and visit tables, the kernels'
        workspaces): the next call of each op prepares it again, so its own allocations can
        be measured."""
        self.kernels.workspaces.clear()
        self._gemm_calls.clear()
        self.bf16_boundary.clear()
        for section in self._sections.values():
            section.forget()

    @property
    def compute_dtype(self):
        """The element type the kernels compute in: float32 for bfloat16 storage (the
        boundary hands them float32 work tensors), else the storage type."""
        return np.dtype(np.float32) if is_bf16(self.dtype) else self.dtype

    def prepare_kernels(self):
        """Compile the C kernels of this backend's data type that are not cached yet (one
        notice on stderr); ``Model.fit`` calls it before the first epoch.  bfloat16 runs the
        float32 kernels."""
        self.kernels.prepare(self.compute_dtype)

    def evaluate_into(self, out, value, keep=False):
        """out (ndarray)[...] = value (op-tree, tensor, array or scalar); ``keep``: out is a
        kept tensor's own array (see ``KernelModules.run_call``).  Operands that do not
        broadcast are one ValueError naming the tree's shapes (``assignment_error``), not
        numpy's."""
        try:
            if isinstance(value, OpNode) and self._add_row_into(out, value, keep):
                return out
            if self.bf16_made and assign_bf16(self, out, value, self._machine):
                return out
            if not (isinstance(value, OpNode) and (
                    run_ufuncs(out, value,
                                  lambda node: self._machine.leading_sum(node, out.dtype))
                    or self._leading_sum_into(out, value) or self._machine.run(out, value))):
                evaluate(out, value)
        except ValueError as error:
            clear = assignment_error(value, out.shape) if isinstance(value, OpNode) else None
            if clear is None:
                raise
            raise clear from error
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

    def run_op(self, op, operands, scalars):
        """The C function of dispatched op-table row ``op``, else (after the row's check) its
        numpy reference; calls on kept tensors are kept (``KernelModules.run_call``).  A row
        whose kernel takes its plan's arguments runs its family's call of :data:`PLAN_CALLS`
        (``KernelModules.run_plan_op``); one whose kernel has ``arguments=CALL`` is run by
        its section's call (:data:`OP_CALLS`), else by the row's reference (tensors as their
        arrays, other operands as they are).  A call with a bfloat16 tensor among its
        operands runs on float32 work tensors (``Bf16Boundary.run_row``), unless its kernel or
        section call takes bf16 operands itself."""
        if self.bf16_made and any(is_bf16_tensor(t) for t in operands):
            self.bf16_boundary.run_row(op, operands, scalars, self._run_op,
                                       self._op_calls.get(op.name))
            return
        self._run_op(op, operands, scalars)

    def _run_op(self, op, operands, scalars):
        if op.kernel.arguments == CALL:
            if not self._op_calls[op.name](op, operands, scalars):
                op.reference(*[getattr(t, "_ary", t) for t in operands], *scalars)
            return
        if op.kernel.arguments == PLAN:
            arguments, keep = [], True
            try:
                for o, t in zip(op.operands, operands):
                    if o.plan is None:
                        keep = keep and t.kept
                        t = t._ary
                    arguments.append(t)
            except AttributeError:
                raise _not_a_tensor(op, operands) from None
            if not self.kernels.run_plan_op(op, arguments, scalars, PLAN_CALLS[op.name], keep):
                op.reference(*arguments, *scalars)
            return
        try:
            arrays = tuple([None if t is None else t._ary for t in operands])
        except AttributeError:
            raise _not_a_tensor(op, operands) from None
        if not self.kernels.run_op(op, arrays, scalars, keep=all_kept(operands)):
            op.reference(*arrays, *scalars)

    def blocksparse_layer(self, layout, block_size):
        """A :class:`~.blocksparse.CPUBlockSparsePlan` (the tables as int32 arrays)."""
        return CPUBlockSparsePlan(layout, block_size)

    def execute_multi(self, assignments):
        pairs = [(out._ary, tree) for out, tree in assignments]
        taken = self._machine.run_multi(pairs, bf16=True) if self.bf16_made else \
            self._machine.run_multi(pairs)
        if not taken:
            for out, tree in pairs:
                self.evaluate_into(out, tree)

    def empty(self, shape, dtype=None, name=None):
        shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(int(s) for s in shape)
        return CPUTensor(self, aligned_empty(shape, self._storage_dtype(dtype)), name)

    def _storage_dtype(self, dtype):
        """The numpy dtype of a new tensor's array (``'bf16'``: bfloat16 bits, which turns the
        bf16 boundary on for this backend)."""
        if dtype is None:
            return self.dtype
        dtype = as_dtype(dtype)
        if dtype.metadata is not None and is_bf16(dtype) and not self.bf16_made:
            check_bf16_on()
            self.bf16_made = True
        return dtype

    def array(self, ary, dtype=None, name=None):
        ary = np.asarray(ary)
        tensor = CPUTensor(self, aligned_empty(ary.shape, self._storage_dtype(dtype)), name)
        if tensor.bf16:
            return tensor.set(ary)
        tensor._ary[...] = ary
        return tensor

    def keep(self, view):
        """Marks a slice made once (at allocate) ``kept``: calls on it are kept by identity
        like those on a tensor's own array and its reshapes (see ``CPUTensor``)."""
        view.kept = True
        return view

    def execute(self, out, optree):
        self.evaluate_into(out._ary, optree)
        return out

    def set_threads(self, n):
        """OpenMP (the C kernels, MKL), OpenBLAS and the split GEMMs on ``n`` threads."""
        set_cpu_threads(n)
        use_cores = getattr(self.kernels.gemm, "use_cores", None)
        if use_cores is not None:
            use_cores(n)

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

    # ---- storage (``backends/storage.py``) ---------------------------------------------------
    def make_arena(self, params):
        """A :class:`~.arena.ParameterArena` (numpy buffers, the fused C step) of ``params``;
        None where one is stored in bfloat16 (its fused step and checks read floats: the
        optimizer's per-tensor path runs, as ``MixedPrecision``'s does)."""
        if any(is_bf16_tensor(t) for p in params for t in (p.value, p.grad)):
            return None
        return make_cpu_arena(self, params)

    def is_finite(self, tensor, work=None):
        """Two reductions over the tensor's numpy array (``work`` is not needed); a bfloat16
        tensor's in widened chunks (``Bf16Boundary.is_finite``)."""
        if is_bf16_tensor(tensor):
            return self.bf16_boundary.is_finite(tensor._ary)
        return array_is_finite(tensor._ary)

    def buffer_of(self, tensor):
        return host_buffer(tensor._ary)

    def workspace_holders(self):
        return [self._gemm_scratch, self._row_scratch, self.kernels.workspaces,
                shared_area_arrays(self.kernels), *self.bf16_boundary.holders()]

    # ---- kernel variants (``backends/variants.py``) ------------------------------------------
    def kernel_variant(self, method, args, kwargs=None):
        """The convolution algorithm a plan chose (``conv_compute`` for bf16 operands on the
        compute path); ``attention_compute`` for the attention rows on bf16 tensors on the
        compute path (without dropout or a block layout); for a product of two bf16 tensors the
        kernel its bf16 path runs where it has one of its own (:meth:`bf16_product_variant`);
        the GEMM provider's class; else ``cpu``."""
        if method in ATTENTION_RUNS and args and is_bf16_tensor(args[0]) and \
                self.bf16_attention_compute() is not None:
            bound = inspect.signature(OPS[method].cost).bind(*args, **(kwargs or {}))
            if bound.arguments.get("dropout") is None and bound.arguments.get("blocks") is None:
                return "attention_compute"
        if method in CONV_METHODS:
            if len(args) >= 2 and is_bf16_tensor(args[1]) and \
                    conv_bf16.runs_compute(args[0], self.bf16_conv_compute()):
                return "conv_compute"
            return conv_algorithm(args[0], method, self.name)
        if method == "compound_dot" and len(args) >= 2 and is_bf16_tensor(args[0]) and \
                is_bf16_tensor(args[1]):
            own = self.bf16_product_variant()
            if own is not None:
                return own
        gemm = self.kernels.gemm
        if method in GEMM_METHODS and gemm is not None:
            return type(gemm).__name__
        return self.name


#: the convolution and pooling passes that read and write bf16 themselves (``conv_bf16.py``,
#: ``pool.py``): their ``fused_<name>`` methods
BF16_FUSED_PASSES = ("fprop_conv", "bprop_conv", "update_conv", "fprop_pool", "bprop_pool")

#: the rows the section files implement, each wrapped in the bf16 boundary (first the fused
#: calls of ``bf16.py``: the products by ``dot_bf16``, gathers and permutations of bits; a
#: product's kept packed call before even its check)
for _name, _method in boundary_methods(
        CPUBackend, OPS.values(),
        {"compound_dot": CPUBackend.fused_compound_dot, "take_rows": CPUBackend.fused_take_rows,
         "scatter_add_rows": CPUBackend.fused_scatter_add_rows,
         "softmax_cross_entropy": CPUBackend.fused_softmax_cross_entropy,
         "permute_axes": CPUBackend.fused_permute_axes,
         **{name: getattr(CPUBackend, f"fused_{name}") for name in BF16_FUSED_PASSES}},
        {"compound_dot": CPUBackend.kept_compound_dot}).items():
    setattr(CPUBackend, _name, _method)
