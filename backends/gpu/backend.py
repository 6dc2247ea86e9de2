"""The GPU backend: pycuda + generated op-tree kernels + CUDA kernels + cuBLAS.

A composition (DESIGN.md, tinygrad's shape), one module per section of the backend contract:
:mod:`.device` (context, streams, pool), :mod:`.tensor` (strided device views), :mod:`.optree`
+ :mod:`.codegen` (every ``out[:] = tree`` is one generated kernel, memoized by the tree's
structure), :mod:`.build` (kernels built by the kernel build system for the device's own
arch), :mod:`.blas` (cuBLAS GEMMs), :mod:`.conv`, :mod:`.pool`, :mod:`.norm`, :mod:`.softmax`,
:mod:`.rows`, :mod:`.attention`, :mod:`.blocksparse`, :mod:`.lrn`, :mod:`.recurrent`, and
:mod:`.prefetch` (batches copied ahead of use).

Storage: float32 (default), float16, bfloat16 (``datatype="bf16"``); arithmetic in float32.
Dropout masks come from a Philox4x32-10 counter-based generator keyed by the seed (bit-exact
with :mod:`philox`), so a seed reproduces them; initial weights are drawn on the host from
``be.rng`` as on every backend.  Temporaries and work buffers are made on first use and reused,
so after the first training step nothing is allocated (:attr:`GPUBackend.allocations`).
"""
import numpy as np

from .. import philox
from ..backend import Backend
from ..ops import OPS
from ..operand_sizes import check_contiguous
from ..ops.table import CALL, PLAN
from ..optree import OpNode
from ..variants import GEMM_METHODS
from . import blas as cublas, build as gpu_build
from .arena import make_device_arena
from .attention import MAX_WIDTH as ATTENTION_MAX_WIDTH, RUNS as ATTENTION_RUNS, \
    GPUAttentionLaunches
from .blocksparse import LAUNCHES as BLOCKSPARSE_LAUNCHES, GPUBlockSparsePlan
from .conv import GPUConvOps
from .device import get_device
from .gelu import GPUGeluOps
from .norm import GPUNormOps
from .optree import OpTreeExecutor
from .pool import GPUPoolOps
from .prefetch import prefetched
from .recurrent import GPURecurrentOps
from .rows import GPURowOps
from .softmax import GPUSoftmaxOps
from .tensor import GPUTensor, as_dtype, contiguous_strides

#: op name -> the launches of a dispatched row whose kernel takes its plan's arguments
#: (``launches(be, plan, *tensors, *scalars)`` -> [(grid, arguments)]), from the families'
#: section files
PLAN_LAUNCHES = {**BLOCKSPARSE_LAUNCHES}
#: op name -> the section class whose ``run(op, operands, scalars)`` (one instance per
#: backend, made on it) runs a dispatched row whose kernel has ``arguments=CALL``: its
#: check, then its launches (a case its kernels do not take is a ValueError)
OP_LAUNCHES = dict.fromkeys(ATTENTION_RUNS, GPUAttentionLaunches)


class GPUBackend(GPURecurrentOps,
                 GPUConvOps, GPUPoolOps, GPUSoftmaxOps, GPURowOps, GPUNormOps, GPUGeluOps,
                 Backend):
    """CUDA backend on device ``device_id`` (see the module docstring).

    ``allow_tf32=True`` lets float32 GEMMs use TF32 tensor cores (off by default)."""

    name = "gpu"
    #: the widest head (dk or dv per head) the attention kernels take; layers check it when
    #: configured
    attention_max_head_width = ATTENTION_MAX_WIDTH

    def __init__(self, batch_size=128, rng_seed=None, datatype=np.float32, device_id=0,
                 allow_tf32=False):
        datatype = as_dtype(datatype)
        super().__init__(batch_size, rng_seed, datatype, device_id)
        if self.dtype.name not in ("float32", "float16") and self.dtype.metadata is None:
            raise ValueError(f"the gpu backend stores float32, float16 or bfloat16 ('bf16'), not "
                             f"{self.dtype.name}")
        self.dtype = datatype
        self.device = get_device(device_id)
        self.blas = cublas.Cublas(self.device.stream.handle, allow_tf32)
        self.executor = OpTreeExecutor(self._compile, self._launch_optree, self._scratch_f32,
                                       max_blocks=self.device.sm_count * 32)
        self._scratch = {}
        self._allocations_at_start = self.device.allocations
        self._rng_key = rng_seed
        self._rng_counter = 0
        sections = {cls: cls(self) for cls in set(OP_LAUNCHES.values())}
        self._op_launches = {name: sections[cls].run for name, cls in OP_LAUNCHES.items()}

    # ---- memory ----------------------------------------------------------------------------
    @property
    def allocations(self):
        """Device allocations made since this backend was created."""
        return self.device.allocations - self._allocations_at_start

    def empty(self, shape, dtype=None, name=None):
        shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(int(s) for s in shape)
        dtype = as_dtype(dtype if dtype is not None else self.dtype)
        nbytes = int(np.prod(shape)) * dtype.itemsize
        base = self.device.alloc(nbytes)
        return GPUTensor(self, shape, dtype, int(base), base, name=name)

    def array(self, ary, dtype=None, name=None):
        ary = np.asarray(ary)
        t = self.empty(ary.shape, dtype if dtype is not None else self.dtype, name)
        return t.set(ary)

    def scratch(self, key, shape, dtype=np.float32):
        """A work tensor made once per ``key`` (and shape/dtype) and reused after."""
        full = (key, tuple(shape), str(as_dtype(dtype)), bool(as_dtype(dtype).metadata))
        t = self._scratch.get(full)
        if t is None:
            t = self._scratch[full] = self.empty(shape, dtype)
        return t

    def scratch_prefix(self, key, shape, dtype=np.float32):
        """A work tensor of ``shape``: the first elements of the largest one asked for under
        ``key`` (and dtype), made once, so a call on fewer rows (a batch of shorter sequences)
        after a larger one allocates nothing."""
        full = (key, str(as_dtype(dtype)), bool(as_dtype(dtype).metadata))
        size = int(np.prod(shape, dtype=np.int64))
        t = self._scratch.get(full)
        if t is None or t.size < size:
            t = self._scratch[full] = self.empty((size,), dtype)
        return t[:size].reshape(tuple(shape))

    def _scratch_f32(self, key, shape):
        return self.scratch(("optree",) + key, shape, np.float32)

    def copy_to_host(self, t):
        """Host copy of ``t``'s raw storage (any view): the span it covers is copied, then
        viewed with its strides."""
        cuda = self.device.cuda
        host_dtype = np.dtype(t.dtype.str)
        if t.size == 0:
            return np.empty(t.shape, dtype=host_dtype)
        span = 1 + sum((s - 1) * st for s, st in zip(t.shape, t.strides))
        buf = np.empty(span, dtype=host_dtype)
        self.device.synchronize()
        cuda.memcpy_dtoh(buf, t.ptr)
        view = np.lib.stride_tricks.as_strided(
            buf, t.shape, tuple(st * host_dtype.itemsize for st in t.strides))
        return np.array(view)

    def copy_from_host(self, t, bits):
        """Copy contiguous host array ``bits`` (``t``'s storage type) into ``t``."""
        if t.size == 0:
            return
        if t.is_contiguous:
            self.device.synchronize()
            self.device.cuda.memcpy_htod(t.ptr, bits)
            return
        staging = self.scratch(("set", t.shape), t.shape, t.dtype)
        self.copy_from_host(staging, bits)
        self.execute(t, staging)

    def pinned_empty(self, shape, dtype=None):
        """Page-locked host memory (for :meth:`copy_async`)."""
        return self.device.cuda.pagelocked_empty(shape, np.dtype(as_dtype(dtype or self.dtype).str))

    def compute_event(self):
        """An event recorded on the compute stream now (the end of the work queued so far)."""
        event = self.device.cuda.Event()
        event.record(self.device.stream)
        return event

    def copy_async(self, t, pinned, after=None):
        """Copy page-locked ``pinned`` (``t``'s storage type) into contiguous ``t`` on the copy
        stream, once event ``after`` (if any) has passed.  Returns the copy's completion event:
        give it to :meth:`wait_for` before compute uses ``t``."""
        if not t.is_contiguous or pinned.nbytes != t.size * t.itemsize:
            raise ValueError(f"copy_async: needs a contiguous tensor and a host buffer of its "
                             f"size, got {t.shape} and {pinned.nbytes} bytes")
        cuda = self.device.cuda
        if after is not None:
            self.device.copy_stream.wait_for_event(after)
        cuda.memcpy_htod_async(t.ptr, pinned, self.device.copy_stream)
        done = cuda.Event()
        done.record(self.device.copy_stream)
        return done

    def wait_for(self, event):
        """Compute work queued from now on starts after ``event`` (no host wait)."""
        self.device.stream.wait_for_event(event)

    # ---- op-trees --------------------------------------------------------------------------
    def execute(self, out, optree):
        if isinstance(optree, np.ndarray):
            out.set(np.broadcast_to(optree, out.shape))
            return out
        if isinstance(optree, (OpNode, GPUTensor)) or np.isscalar(optree) or (
                hasattr(optree, "ndim") and getattr(optree, "ndim", 1) == 0):
            self.executor.execute(out, optree)
            return out
        raise TypeError(f"cannot assign a {type(optree).__name__} to a GPU tensor; expected a "
                        f"number, a GPU tensor, an op-tree or a numpy array")

    def execute_multi(self, assignments):
        if all(isinstance(tree, OpNode) for _, tree in assignments):
            self.executor.execute_multi(assignments)
        else:
            super().execute_multi(assignments)

    def _compile(self, name, source):
        arch = self.device.arch
        return self.device.function(("optree", name), lambda: gpu_build.generated_cubin(
            name, source, arch), name, None)

    def _launch_optree(self, kernel, plan, out, leaves, scalars):
        if getattr(kernel, "arg_format", None) is None:
            kernel.prepare(plan.arg_format)
        args = [out.ptr] + [l.ptr for l in leaves] + [np.float32(s) for s in scalars] + \
            list(plan.int_args)
        self.device.launch(kernel, plan.grid, plan.block, args)

    def blocksparse_layer(self, layout, block_size):
        """A :class:`~.blocksparse.GPUBlockSparsePlan` (its tables copied to the device)."""
        return GPUBlockSparsePlan(layout, block_size, self)

    def kernel(self, variant, name, arg_format):
        """Function ``name`` of table variant ``variant`` (built for this device's arch)."""
        arch = self.device.arch
        return self.device.function(("variant", variant), lambda: gpu_build.variant_cubin(
            variant, arch), name, arg_format)

    def run_op(self, op, operands, scalars):
        """The launches of dispatched op-table row ``op``: every operand contiguous and of
        the first one's storage; each launch gets the operand pointers (0 for an absent one),
        the sizes (M, D) (``op.sizes``) and the scalars (float32 and int), over a grid of one
        thread per element, one block per row, or one thread per column.  A row whose kernel
        takes its plan's arguments gets its grids and arguments from its family's
        :data:`PLAN_LAUNCHES`; one whose kernel has ``arguments=CALL`` is run whole by its
        section's launches (:data:`OP_LAUNCHES`); a row without launches is launched by its
        section file (``GPU<Family>Ops``), never here."""
        if op.kernel.arguments == CALL:
            self._op_launches[op.name](op, operands, scalars)
            return
        if not op.kernel.launches:
            raise NotImplementedError(f"{op.name}: the op table gives no CUDA launch for it; "
                                      f"the GPU backend's section file must implement it")
        op.check_operands(operands, scalars)
        tensors = [(o, t) for o, t in zip(op.operands, operands) if o.plan is None]
        check_contiguous(op.name, **{o.name: t for o, t in tensors})
        storage = tensors[0][1].storage
        for o, t in tensors:
            if t is not None and t.storage != storage:
                raise TypeError(f"{op.name}: {o.name} has the {t.storage} storage, expected "
                                f"{storage} (that of {tensors[0][0].name})")
        if op.kernel.arguments == PLAN:
            made = PLAN_LAUNCHES[op.name](self, *operands, *op.numbers(scalars))
            for launch, (grid, args) in zip(op.kernel.launches, made):
                func = self.kernel(op.kernel.cuda_variant, f"{launch.function}_{storage}",
                                   launch.arg_format)
                self.device.launch(func, grid, (launch.threads, 1, 1), args)
            return
        M, D = op.sizes(operands)
        fmt = "P" * len(operands) + "ii" + "".join("i" if s.kind == "int" else "f"
                                                   for s in op.scalars)
        args = [0 if t is None else t.ptr for t in operands] + [M, D] + [
            v if s.kind == "int" else np.float32(v)
            for s, v in zip(op.scalars, op.numbers(scalars))]
        for launch in op.kernel.launches:
            func = self.kernel(op.kernel.cuda_variant, f"{launch.function}_{storage}", fmt)
            n = {"elements": M * D, "rows": M, "columns": D}[launch.grid]
            grid = (max(1, min(n, self.device.sm_count * 32)), 1) if launch.grid == "rows" \
                else (self.device.blocks(n, launch.threads), 1)
            self.device.launch(func, grid, (launch.threads, 1, 1), args)

    # ---- GEMM ------------------------------------------------------------------------------
    def _operand(self, t, key):
        """``t`` itself when cuBLAS can read its layout, else a contiguous scratch copy."""
        shape, strides = t.shape[-2:], t.strides[-2:]
        if cublas.matrix_layout(shape, strides) is not None:
            return t
        copy = self.scratch(("gemm", key), t.shape, t.dtype)
        self.execute(copy, t)
        return copy

    def _check_gemm(self, A, B, C, transA, transB, what):
        OPS[what].check(what, A, B, C, transA, transB)
        if A.storage not in cublas.DATA_TYPES:
            raise TypeError(f"{what}: A, B and C must share a float32, float16 or bfloat16 "
                            f"storage, got {A.storage}, {B.storage}, {C.storage}")

    def compound_dot(self, A, B, C, alpha=1.0, beta=0.0, transA=False, transB=False):
        self._check_gemm(A, B, C, transA, transB, "compound_dot")
        self._gemm(A, B, C, alpha, beta, transA, transB, 1)
        return C

    def batched_dot(self, A, B, C, alpha=1.0, beta=0.0, transA=False, transB=False):
        self._check_gemm(A, B, C, transA, transB, "batched_dot")
        batch = C.shape[0]
        self._gemm(A, B, C, alpha, beta, transA, transB, batch)
        return C

    def _gemm(self, A, B, C, alpha, beta, transA, transB, batch):
        if C.size == 0:
            return
        layout = cublas.matrix_layout(C.shape[-2:], C.strides[-2:])
        out = C if layout is not None and not layout[0] else None
        target = C if out is not None else self.scratch(("gemm", "C"), C.shape, C.dtype)
        if out is None and beta != 0.0:
            self.execute(target, C)
        A, B = self._operand(A, "A"), self._operand(B, "B")
        call = cublas.gemm_arguments((A.shape[-2:], A.strides[-2:]),
                                     (B.shape[-2:], B.strides[-2:]),
                                     (target.shape[-2:], target.strides[-2:]), transA, transB)
        transa, transb, m, n, k, (_, lda), (_, ldb), ldc = call
        stride = [t.strides[0] if t.ndim == 3 and t.shape[0] > 1 else 0 for t in (B, A, target)]
        self.blas.gemm(C.storage, transa, transb, m, n, k, alpha, B.ptr, lda, A.ptr, ldb, beta,
                       target.ptr, ldc, batch, *stride)
        if out is None:
            self.execute(C, target)

    # ---- randomness ------------------------------------------------------------------------
    def example_dropout_mask(self, mask, keep, key, step, stream, first, examples=None):
        """The per-example Philox masks (:func:`philox.example_masks`) drawn on the device by
        ``nl_example_mask_*``: no host work or copy per step."""
        if not (mask.is_contiguous and mask.storage in ("f32", "f16", "bf16")):
            return super().example_dropout_mask(mask, keep, key, step, stream, first, examples)
        rows = self.example_rows(mask, examples)
        per = mask.size // rows
        seed_lo, seed_hi = philox.seed_key(key)
        first = int(first)
        func = self.kernel("philox", f"nl_example_mask_{mask.storage}", "PqqIIIIIIff")
        self.device.launch(func, (self.device.blocks(rows * philox.draw_groups(per)), 1),
                           (256, 1, 1), [mask.ptr, rows, per, first & 0xFFFFFFFF, first >> 32,
                                         int(step) & 0xFFFFFFFF, int(stream) & 0xFFFFFFFF,
                                         seed_lo, seed_hi, np.float32(keep),
                                         np.float32(1.0 / keep)])
        return mask

    def uniform(self, out, low=0.0, high=1.0):
        """Philox4x32-10 uniforms in [low, high) (see :mod:`philox` for the exact stream)."""
        target = out if out.is_contiguous and out.storage in ("f32", "f16", "bf16") else \
            self.scratch(("uniform",), out.shape, np.float32)
        seed_lo, seed_hi = philox.seed_key(self._rng_key)
        base = self._rng_counter
        func = self.kernel("philox", f"nl_uniform_{target.storage}", "PqIIIIff")
        self.device.launch(func, (self.device.blocks(philox.draw_groups(out.size)), 1),
                           (256, 1, 1), [target.ptr, out.size, seed_lo, seed_hi,
                                         base & 0xFFFFFFFF, base >> 32, np.float32(low),
                                         np.float32(high)])
        self._rng_counter += philox.draw_groups(out.size)
        if target is not out:
            self.execute(out, target)
        return out

    def device_rng_state(self):
        """The device RNG's state (seed and counter), JSON-able."""
        return {"generator": "philox4x32_10", "seed": self._rng_key, "counter": self._rng_counter}

    def set_device_rng_state(self, state):
        if state.get("generator") != "philox4x32_10":
            raise ValueError(f"the gpu backend's device RNG is philox4x32_10; the state given is "
                             f"for {state.get('generator')!r}")
        self._rng_key, self._rng_counter = state["seed"], int(state["counter"])

    def prefetched(self, iterator, limit=None):
        """``iterator`` wrapped in :class:`~.prefetch.Prefetched` (the next batch's copy queued
        before the current one is handed out) when it follows the iterator protocol."""
        return prefetched(iterator, self, limit)

    def synchronize(self):
        self.device.synchronize()

    def strides_of(self, shape):
        return contiguous_strides(shape)

    # ---- storage (``backends/storage.py``) ---------------------------------------------------
    def make_arena(self, params):
        """A :class:`~.arena.DeviceArena` (device buffers, one generated kernel per run) of
        ``params``."""
        return make_device_arena(self, params)

    def buffer_of(self, tensor):
        return ("device", tensor.ptr), int(np.prod(tensor.shape)) * tensor.itemsize

    def workspace_holders(self):
        return [self._scratch]

    def device_pointer(self, tensor):
        return tensor.ptr

    def kernel_variant(self, method, args, kwargs=None):
        return "cublas" if method in GEMM_METHODS else self.name
