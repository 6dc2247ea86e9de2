"""The bfloat16 boundary of the CPU backend: every op of the op table runs on bf16 tensors by
one mechanism, driven by the rows' operands (``backends/ops/``: which are read, written,
updated, optional).

For a call with a bf16 operand (a :class:`~.tensor.CPUTensor` whose ``bf16`` is True), after
the row's check on the operands as given:

1. each bf16 operand the op reads (not ``written``, or ``updated``) is widened (exactly) into a
   float32 *work tensor* the boundary keeps, one per (op, operand, shape), made at the first
   such call and used again after, so a training loop allocates nothing after its first step;
   a written-only operand gets its work tensor unread; one array given as two operands (an
   output that may be its input: ``pre`` of ``gelu``, ``dx`` of ``gelu_bprop``) shares one;
2. the float32 implementation runs on the work tensors (kernel, section or reference:
   unchanged), so every reduction inside an op stays float32;
3. each written bf16 operand is narrowed back, rounding to nearest even (the cast kernel,
   ``kernels/cpu/bf16/bf16_cast.c``); a strided view through a bit buffer kept the same way.

Operands that are not bf16 (float32 masters, int32 ids, plans, a dropout stream) are passed
as they are.  The dispatched rows go through :meth:`Bf16Boundary.run_row` (from
``CPUBackend.run_op``); the rows the backend's section files implement (products,
convolutions, pooling, softmax with cross-entropy, gathers, draws, recurrent sequences) through
the methods :func:`boundary_methods` makes from their rows.  The contract methods without a
row (creation, fill, copy, op-trees, ``get``/``set``) are handled by the backend and its tensor
themselves.
"""
import functools
import inspect

import numpy as np

from ..storage import array_is_finite
from .bf16_kernels import F32, from_bf16, to_bf16
from .kept_calls import BF16_CALL, KeptCalls
from .tensor import CPUTensor, aligned_empty

#: the uint32 view a strided bf16 operand is widened through
_U32 = np.dtype(np.uint32)
#: what a fused call returns where it does not take the operands
NOT_TAKEN = object()
#: elements :meth:`Bf16Boundary.is_finite` widens at a time
CHUNK = 1 << 16
#: the operand sets whose row check passed that a boundary remembers (kept tensors only)
MAX_CHECKED = 4096


def is_bf16_tensor(value):
    """True for a CPU tensor holding bfloat16 bits."""
    return value.__class__ is CPUTensor and value.bf16


class Bf16Boundary:
    """The work tensors and the widening and narrowing of one CPU backend (see the module
    docstring)."""

    def __init__(self, backend):
        self._backend = backend
        self._work = {}
        self._bits = {}
        self._checked = KeptCalls(MAX_CHECKED)
        self._casts = None

    def clear(self):
        """Drop the work tensors, bit buffers and remembered checks (made again at the next
        call)."""
        self._work.clear()
        self._bits.clear()
        self._checked.clear()

    def checked(self, name, operands, scalars, check):
        """Run ``check()`` (a row's check of ``operands``, tensors or None, with ``scalars``)
        unless it passed before on these same living kept tensors' arrays and scalars (as a
        kept kernel call skips it)."""
        if not all(t is None or getattr(t, "kept", False) for t in operands):
            check()
            return
        arrays = tuple(getattr(t, "_ary", None) for t in operands)
        key = (name, scalars) + tuple(map(id, arrays))
        if self._checked.find(key, arrays) is None:
            check()
            self._checked.keep(key, arrays, True)

    def _cast_calls(self):
        """(ffi, widen, narrow) of the cast kernels (C functions on n elements), or None
        where they cannot be built (numpy converts then)."""
        if self._casts is None:
            module = self._backend.kernels.variant("bf16_cast")
            self._casts = (False,) if module is None else \
                (module.ffi, module.lib.nl_bf16_to_f32, module.lib.nl_f32_to_bf16)
        return self._casts if len(self._casts) == 3 else None

    def holders(self):
        """The dicts of work arrays this boundary keeps (for ``workspace_bytes``)."""
        return [self._work, self._bits]

    def work_tensor(self, key, shape):
        """The float32 work tensor kept under ``key`` (made at its first use)."""
        full = (key, tuple(shape))
        work = self._work.get(full)
        if work is None:
            work = self._work[full] = CPUTensor(self._backend, aligned_empty(shape, F32))
        return work

    def widen(self, src, dst):
        """float32 ``dst`` (contiguous) = bf16 bit patterns ``src`` (any strides), exactly."""
        if src.flags.c_contiguous:
            casts = self._cast_calls()
            if casts is None:
                from_bf16(self._backend.kernels, src, dst)
                return
            ffi = casts[0]
            casts[1](ffi.from_buffer("uint16_t[]", src), ffi.from_buffer("float[]", dst),
                     src.size)
            return
        bits = dst.view(_U32)
        np.copyto(bits, src, casting="unsafe")
        np.left_shift(bits, 16, out=bits)

    def narrow(self, src, dst, key):
        """bf16 ``dst`` (any strides) = float32 ``src`` (contiguous), rounded to nearest even;
        a strided ``dst`` through a contiguous bit buffer kept under ``key``."""
        casts = self._cast_calls()
        if dst.flags.c_contiguous:
            if casts is None:
                to_bf16(self._backend.kernels, src, dst)
                return
            ffi = casts[0]
            casts[2](ffi.from_buffer("float[]", src), ffi.from_buffer("uint16_t[]", dst),
                     src.size)
            return
        full = (key, dst.shape)
        bits = self._bits.get(full)
        if bits is None:
            bits = self._bits[full] = aligned_empty(dst.shape, np.uint16)
        to_bf16(self._backend.kernels, src, bits)
        np.copyto(dst, bits, casting="unsafe")

    def is_finite(self, ary, chunk=CHUNK):
        """True when bf16 array ``ary`` holds no inf or NaN: widened ``chunk`` elements at a
        time into a kept float32 buffer, each checked by two reductions (nothing allocated
        after the first call; a non-contiguous view is widened whole into a work tensor)."""
        if not ary.flags.c_contiguous:
            work = self.work_tensor(("is_finite", "x"), ary.shape)._ary
            self.widen(ary, work)
            return array_is_finite(work)
        flat = ary.reshape(-1)
        buf = self.work_tensor(("is_finite", "chunk"), (min(chunk, flat.size),))._ary
        for start in range(0, flat.size, chunk):
            part = flat[start:start + chunk]
            widened = buf[:part.size]
            self.widen(part, widened)
            if not array_is_finite(widened):
                return False
        return True

    def swap(self, op_name, operands):
        """``(values, written)`` for ``operands``, a list of (name, value, reads, writes): the
        values with each bf16 tensor replaced by its work tensor (widened where read), and
        the (work array, bf16 array, key) pairs to narrow after the call.  The same array given
        twice (an output that may be its input) shares one work tensor; two views of one
        memory are widened and narrowed apart, as if the op did not alias them."""
        values, written, seen = [], [], {}
        for name, value, reads, writes in operands:
            if not is_bf16_tensor(value):
                values.append(value)
                continue
            ary = value._ary
            found = seen.get(id(ary))
            if found is None:
                work = self.work_tensor((op_name, name), ary.shape)
                seen[id(ary)] = found = [work, False, False]
            work = found[0]
            if reads and not found[1]:
                self.widen(ary, work._ary)
                found[1] = True
            if writes and not found[2]:
                written.append((work._ary, ary, (op_name, name)))
                found[2] = True
            values.append(work)
        return values, written

    def narrow_all(self, written):
        for src, dst, key in written:
            self.narrow(src, dst, key)

    def run_row(self, op, operands, scalars, run, call=None):
        """Dispatched row ``op`` on ``operands`` (row order) with a bf16 tensor among them: the
        row's check, then the ``bf16_symbol`` of its kernel for ``scalars`` (``Op.c_call``)
        where it has one and every operand is bf16 (no widening of the rows: the C function
        stages them itself; :meth:`_run_fused`), else ``run(op, work operands, scalars)``
        between the widening and the narrowing.  ``call``: the section's call of a row run
        whole by its section file (``arguments="call"``) whose kernel has a ``bf16_symbol``,
        tried first on the operands as given (True: it took them)."""
        if call is None and self._run_kept(op, operands, scalars):
            return
        self.checked(op.name, operands, scalars, lambda: op.check_operands(operands, scalars))
        if call is not None:
            if op.kernel.bf16_symbol is not None and call(op, operands, scalars):
                return
        elif self._run_fused(op, operands, scalars):
            return
        values, written = self.swap(op.name, [
            (o.name, t, not o.written or o.updated, o.written)
            for o, t in zip(op.operands, operands)])
        run(op, tuple(values), scalars)
        self.narrow_all(written)

    def _run_kept(self, op, operands, scalars):
        """Row ``op``'s ``bf16_symbol`` call that :meth:`_run_fused` kept for these same
        living arrays (made after the row's check passed on them, as the check it stands
        for): True, or False where there is none (nothing run)."""
        try:
            arrays = tuple(None if t is None else t._ary for t in operands)
        except AttributeError:
            return False
        return self._backend.kernels.run_kept(op.name + BF16_CALL, arrays, scalars)

    def _run_fused(self, op, operands, scalars):
        """Row ``op``'s ``bf16_symbol`` on ``operands``, every one bf16 (no widening: the C
        function stages rows itself); False (nothing run) where one is not or the kernels do
        not take the case."""
        for t in operands:
            if t is not None and not (t.__class__ is CPUTensor and t.bf16):
                return False
        return self._backend.kernels.run_bf16_op(
            op, tuple(None if t is None else t._ary for t in operands), scalars,
            keep=all(t is None or t.kept for t in operands))


def boundary_method(op, method, fused=None, kept=None):
    """Backend method ``method`` (a section's implementation of row ``op``, which names its
    operands) wrapped in the boundary, written from its signature (Python binds the
    arguments, as the op table's methods do): on a backend that has made no bf16 tensor, or a
    call with none among the row's operands, the method itself runs; otherwise
    :func:`_boundary_call` runs it.  ``fused(backend, arguments)`` (the arguments by name),
    when given, runs the call first and returns the method's result, or :data:`NOT_TAKEN`
    where it does not take the operands (the bf16 GEMMs); ``kept(backend, arguments)``, when
    given, runs even before the row's check: a call it kept from an earlier, checked call on
    these same living arrays (the same shapes), or :data:`NOT_TAKEN`."""
    signature = inspect.signature(method)
    params = list(signature.parameters.values())[1:]
    if any(p.kind not in (p.POSITIONAL_OR_KEYWORD,) for p in params):
        raise ValueError(f"{op.name}: the bf16 boundary wraps methods of plain parameters")
    names = [p.name for p in params]
    operands = [o.name for o in op.operands if o.name in names]
    defaults = {f"_d_{p.name}": p.default for p in params if p.default is not p.empty}
    header = ", ".join(p.name if f"_d_{p.name}" not in defaults else f"{p.name}=_d_{p.name}"
                       for p in params)
    given = ", ".join(names)
    source = (f"def {op.name}(self, {header}):\n"
              f"    if not self.bf16_made or not ({' or '.join(f'_is({n})' for n in operands)}):\n"
              f"        return _method(self, {given})\n"
              f"    return _call(self, {{{', '.join(f'{n!r}: {n}' for n in names)}}})\n")
    checked = None
    if op.check is not None:
        checked = tuple(inspect.signature(op.check).parameters)[1:]
        named = {o.name for o in op.operands}
        checked = (tuple(n for n in checked if n in named),
                   tuple(n for n in checked if n not in named))
    call = functools.partial(_boundary_call, op, method, fused, kept, checked,
                             [(o.name, not o.written or o.updated, o.written)
                              for o in op.operands if o.name in names])
    namespace = {"_method": method, "_is": is_bf16_tensor, "_call": call, **defaults}
    exec(compile(source, f"<bf16 boundary: {op.name}>", "exec"), namespace)  # noqa: S102
    wrapped = functools.wraps(method)(namespace[op.name])
    return wrapped


def _boundary_call(op, method, fused, kept, checked, flags, backend, arguments):
    """``method`` of row ``op`` on ``arguments`` (by name) with a bf16 operand among them:
    ``kept`` where it has the call, else the row's check on them as given (``checked``: its
    operand and other parameters; the products' element types must agree, as on the GPU),
    then ``fused`` where given, else the operands through :meth:`Bf16Boundary.swap` around the
    method; a result that is a work tensor is given back as the operand it stands for."""
    if kept is not None:
        result = kept(backend, arguments)
        if result is not NOT_TAKEN:
            return result
    if checked is not None:
        names, others = checked
        backend.bf16_boundary.checked(
            op.name, [arguments[n] for n in names], tuple(arguments[n] for n in others),
            lambda: op.check(op.name, **{n: arguments[n] for n in names + others}))
    if fused is not None:
        result = fused(backend, arguments)
        if result is not NOT_TAKEN:
            return result
    given = [(n, arguments[n], reads, writes) for n, reads, writes in flags]
    values, written = backend.bf16_boundary.swap(op.name, given)
    originals = {}
    for (name, value, _, _), swapped in zip(given, values):
        arguments[name] = swapped
        originals[id(swapped)] = value
    result = method(backend, **arguments)
    backend.bf16_boundary.narrow_all(written)
    return originals.get(id(result), result)


def boundary_methods(cls, rows, fused, kept=None):
    """{name: wrapped method} for each row of ``rows`` that names its operands and is not
    dispatched by the table, of backend class ``cls`` (``fused``: {name: fused call};
    ``kept``: {name: kept call}, see :func:`boundary_method`)."""
    kept = kept or {}
    return {op.name: boundary_method(op, getattr(cls, op.name), fused.get(op.name),
                                     kept.get(op.name))
            for op in rows if op.operands and not op.dispatched}
