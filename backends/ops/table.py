"""The op table's row type: one :class:`Op` describes one backend op once (its operands, the
operand check, the numpy reference, the C and CUDA kernels that implement it, its cost, and
the sample sizes the per-op tests run it at).  The rows live in one module per family
(``linear.py``, ``norm.py``, ``softmax.py``, ``elementwise.py``, ``blocksparse.py``,
``recurrent.py``); ``__init__.py`` gathers them into :data:`~neonlite.backends.ops.OPS`.

A row with ``kernel`` set is *dispatched by the table*: the backend contract's method is made
from the row (``dispatch.py``), the CPU backend calls C function ``kernel.c_symbol`` of
``kernels/cpu/<kernel.c_source>.c`` where ``kernel.takes`` the case (else runs
``reference``), and the GPU backend launches ``kernel.launches`` of CUDA variant
``kernel.cuda_variant``.  A C function takes, by default, the operand pointers in the row's
order (an absent optional operand as NULL), then the ``sizes`` (rows M and last axis D of the
operand ``kernel.sizes_of``, the first by default, as ``int64_t``), then the scalars
(``double`` and ``int``; a scalar with ``codes`` is given by name and passed as its code);
``kernel.arguments`` names another order (some scalars left out, say), and a ``kernel.work``
array (float64, as long as the C function ``<work>_work_size(M, D)`` says, kept by the
backend) goes where it says ``"work"``.  A CUDA launch takes the operand pointers, then M and
D as ``int``, then the scalars as ``float`` and ``int``.  A row whose kernel has no
``launches`` is launched by the GPU backend's section file, from a plan of its own (column
sums in row slices, a grid from the device): the row still gives its signature, check,
reference, cost and CPU kernel.  A row whose kernel has ``arguments=PLAN`` (``"plan"``) takes a
plan first (an operand with ``plan`` set, made once at configure time, such as
``blocksparse_layer``'s): its arguments are the plan's (tables, work arrays, sizes), so the
backend's section file of the family makes them (the CPU backend's ``PLAN_CALLS``, the GPU
backend's ``PLAN_LAUNCHES``, by op name), and the GPU launches take the ``arg_format`` and the
grid the section file gives.  A row whose kernel has ``arguments=CALL`` (``"call"``) is run
whole by its family's section file (the CPU backend's ``OP_CALLS``, the GPU backend's
``OP_LAUNCHES``, by op name): the section runs the row's check, then chooses its kernel entry
point, tiles, work arrays, staging and kept calls from the operands (the CPU one answers False
for a case its kernels do not take, and the row's reference runs); its rows may take ``value``
operands (a dropout stream, a block layout) and ``trailing`` scalars.

Rows without ``kernel`` are ops whose backends make real choices (algorithms, tiles, plans) in
their section files; the row still gives their cost and reference, and the per-op tests and
the profiler read it.
"""
from dataclasses import dataclass, field
from operator import itemgetter

import numpy as np

from ..optree import OpNode

#: the kinds of scalar arguments a dispatched kernel takes
SCALAR_KINDS = ("int", "float")
#: how a GPU launch covers its operands: one thread per element of the first operand, one
#: block per row (M rows), one thread per column (the last axis)
GRIDS = ("elements", "rows", "columns", "plan")


@dataclass(frozen=True)
class Operand:
    """One tensor argument: ``name`` as in the contract; ``shape`` in the row's size symbols
    (``("M", "D")``, ``("M", 1)``, ``(1, "D")``; None: checked by the op itself); ``written``
    when the op writes it; ``optional`` when it may be None; ``trailing``: a keyword argument
    after the scalars, None by default (a residual joined in); ``pair``: the operand given
    exactly when this one is; ``positive``: the per-op tests fill it with values in
    [0.5, 1.5); ``mask``: a row mask of 0s and 1s, of any element type; ``updated``: written
    and read first (gates activated in place, an error accumulated), so the per-op tests fill
    it like an input; ``plan``: not a tensor but the plan the backend method of that name
    makes (``"blocksparse_layer"``), taken as it is by the check, the reference and the
    kernel's section file (the per-op tests make it with ``Op.sample_plan``); ``value``: not a
    tensor but a description taken as it is by the check, the reference and the section file
    (an attention's dropout stream or block layout; None in the per-op tests' call)."""
    name: str
    shape: tuple = None
    written: bool = False
    optional: bool = False
    trailing: bool = False
    pair: str = None
    positive: bool = False
    mask: bool = False
    updated: bool = False
    plan: str = None
    value: bool = False


@dataclass(frozen=True)
class Scalar:
    """One scalar argument after the operands: ``kind`` 'int' or 'float'; ``default`` (None:
    required); ``sample``: the value the per-op tests pass; ``codes``: {name: int code} when
    the scalar is given by name (an activation), the kernels taking its code and the
    reference its name; ``checked``: the row's check takes it too, by name (a flag that
    decides the operands' shapes, such as ``transposed``); ``trailing``: placed after the
    ``trailing`` operands in the method's signature (``heads`` of ``attention``)."""
    name: str
    kind: str = "float"
    default: object = None
    sample: object = None
    codes: dict = None
    checked: bool = False
    trailing: bool = False


@dataclass(frozen=True)
class Launch:
    """One CUDA launch of a dispatched op: ``function`` (``<function>_<storage>`` in the
    cubin) over ``grid`` (one of :data:`GRIDS`; ``"plan"``: the grid the family's section file
    makes) of ``threads`` per block; ``arg_format``: its parameters' format (pycuda's) when
    the kernel's ``arguments`` are :data:`PLAN`."""
    function: str
    grid: str = "elements"
    threads: int = 256
    arg_format: str = None


#: the names ``Kernel.arguments`` gives besides the row's operands and scalars: the sizes
#: (M, D) and the work array
SIZES, WORK = "sizes", "work"
#: ``Kernel.arguments`` of a row whose arguments its family's section file makes from its plan
PLAN = "plan"
#: ``Kernel.arguments`` of a row whose family's section file runs the whole call
CALL = "call"


@dataclass(frozen=True)
class Kernel:
    """The compiled code of a dispatched op (see the module docstring): C function
    ``c_symbol`` of ``kernels/cpu/<c_source>.c`` and the CUDA ``launches`` of variant
    ``cuda_variant`` (none: the GPU backend's section file launches the op from a plan of its
    own); the sizes they take are those of operand ``sizes_of`` (None: the first).

    ``arguments``: the C function's parameters by name (operands, scalars, :data:`SIZES`,
    :data:`WORK`); None: the operands, the sizes, the scalars; :data:`PLAN`: made by the
    family's section file from the row's plan operand; :data:`CALL`: the whole call run by
    the family's section file.  ``work``: the stem of the C
    function ``<work>_work_size(M, D)`` giving the length of the float64 work array the C
    function takes (``KernelModules.block_sums_work``).  ``takes``: None, or
    ``takes(*operands, *scalars) -> bool`` in row order, on arrays that passed the row's
    check: False where the C function does not take the case (another axis than the last,
    an output aliasing an input), which then runs the reference.  ``bf16_symbol``: the C
    function of the same source and arguments taking every operand as bfloat16 bits (float32
    arithmetic, in the float32 variant), which the CPU backend's bf16 boundary calls instead of
    widening and narrowing the operands (a kernel of ``choices`` gives its own, or none); of a
    :data:`CALL` row, the C function its section file calls on bf16 operands (the boundary
    tries the section's call first)."""
    c_source: str
    c_symbol: str
    cuda_variant: str = None
    launches: tuple = ()
    sizes_of: str = None
    arguments: tuple = None
    work: str = None
    takes: object = None
    choose_by: str = None
    choices: dict = None
    bf16_symbol: str = None


@dataclass(frozen=True)
class Op:
    """One backend op (see the module docstring).

    Attributes:
        name (str): the backend method.
        family (str): the row module it lives in.
        doc (str): what it computes (the contract's docstring).
        cost (callable): ``cost(*args, **kwargs) -> (flops, bytes)`` (``costs.py``).
        operands (tuple): :class:`Operand` s, in call order: every dispatched row's, and
            those of a section row whose op takes tensors (the CPU backend's bf16 boundary
            widens the operands a row reads and narrows those it writes).
        scalars (tuple): :class:`Scalar` s after them.
        check (callable or None): ``check(op_name, **operands)``; raises before any kernel.
        reference (callable or None): the numpy definition; dispatched rows take numpy arrays
            in the operands' order, then the scalars.
        kernel (Kernel or None): set for a row the table dispatches.
        c_symbols (tuple): the C functions implementing it (``source:function``).
        cuda_functions (tuple): the CUDA kernels implementing it (``variant:function``).
        sample (dict): sizes of the per-op tests' call (``{"M": 6, "D": 40}``).
        backward (str or None): the op computing this one's gradient (for gradient checks).
        loss_of (str): the written operand whose gradient the backward row takes as ``dy``.
        gradients (tuple): (backward operand, forward operand) pairs: the backward row writes
            the gradient of the forward one (empty: every ``d<name>`` of the backward row is
            that of ``<name>``).
        bf16_class (str or None): the op class (``gemm``, ``conv``, ``attention``) whose
            bfloat16 path the CPU backend chooses by measurement for this op, which then also
            takes bf16-stored operands (``cpu/bf16_choice.py``); None: float types only.
        sample_plan (callable or None): ``sample_plan(make)``, the plan operand of the per-op
            tests' call made by ``make`` (the backend method the operand's ``plan`` names).
        returns (str or None): the operand the backend method returns (None: nothing).
    """
    name: str
    family: str
    doc: str
    cost: object
    operands: tuple = ()
    scalars: tuple = ()
    check: object = None
    reference: object = None
    kernel: Kernel = None
    c_symbols: tuple = ()
    cuda_functions: tuple = ()
    sample: dict = field(default_factory=dict)
    backward: str = None
    loss_of: str = "y"
    gradients: tuple = ()
    bf16_class: str = None
    sample_plan: object = None
    returns: str = None

    def __post_init__(self):
        names = [o.name for o in self.operands]
        object.__setattr__(self, "_operand_names", tuple(names))
        object.__setattr__(self, "_converters", tuple(
            s.codes.__getitem__ if s.codes is not None else int if s.kind == "int" else float
            for s in self.scalars))
        object.__setattr__(self, "_coded", tuple(s if s.codes is not None else None
                                                 for s in self.scalars))
        object.__setattr__(self, "_pairs", tuple((o.name, o.pair) for o in self.operands
                                                 if o.pair is not None))
        object.__setattr__(self, "_checked", tuple(i for i, s in enumerate(self.scalars)
                                                   if s.checked))
        if self.kernel is None:
            return
        for s in self.scalars:
            if s.kind not in SCALAR_KINDS:
                raise ValueError(f"op {self.name}: scalar {s.name} kind must be one of "
                                 f"{SCALAR_KINDS}, got {s.kind!r}")
        for launch in self.kernel.launches:
            if launch.grid not in GRIDS:
                raise ValueError(f"op {self.name}: launch grid must be one of {GRIDS}, got "
                                 f"{launch.grid!r}")
        if self.kernel.sizes_of is not None and self.kernel.sizes_of not in names:
            raise ValueError(f"op {self.name}: sizes_of names no operand: "
                             f"{self.kernel.sizes_of!r}")
        object.__setattr__(self, "_sizes_at", 0 if self.kernel.sizes_of is None
                           else names.index(self.kernel.sizes_of))
        object.__setattr__(self, "_c_order", self._argument_order(self.kernel))
        calls = {None: (self.kernel, self._c_order)}
        choice_at = None
        if self.kernel.choose_by is not None:
            scalar_names = [s.name for s in self.scalars]
            if self.kernel.choose_by not in scalar_names or not self.kernel.choices:
                raise ValueError(f"op {self.name}: choose_by must name a scalar and choices "
                                 f"give its kernels, got {self.kernel.choose_by!r}")
            choice_at = scalar_names.index(self.kernel.choose_by)
            calls = {value: (k, self._argument_order(k))
                     for value, k in self.kernel.choices.items()}
        object.__setattr__(self, "_calls", calls)
        object.__setattr__(self, "_choice_at", choice_at)
        object.__setattr__(self, "c_symbols", tuple(dict.fromkeys(
            [f"{k.c_source}:{k.c_symbol}" for k, _ in calls.values()]
            + [f"{k.c_source}:{k.bf16_symbol}" for k in (self.kernel, *(k for k, _ in
                                                                          calls.values()))
               if k.bf16_symbol])))
        if self.kernel.launches:
            object.__setattr__(self, "cuda_functions", tuple(
                f"{self.kernel.cuda_variant}:{l.function}" for l in self.kernel.launches))

    def _argument_order(self, k):
        """Positions in (operands..., M, D, scalars..., work) of the arguments of kernel
        ``k``'s C function (``k.arguments``); None for a :data:`PLAN` row (its section file
        makes the call) or a :data:`CALL` row (its section file runs it)."""
        if k.arguments in (PLAN, CALL):
            return None
        n, scalars = len(self.operands), [s.name for s in self.scalars]
        arguments = k.arguments if k.arguments is not None else \
            tuple(self._operand_names) + (SIZES,) + tuple(scalars)
        where = {name: i for i, name in enumerate(self._operand_names)}
        where.update({name: n + 2 + i for i, name in enumerate(scalars)})
        where[WORK] = n + 2 + len(scalars)
        unknown = [a for a in arguments if a not in where and a != SIZES]
        if unknown or (WORK in arguments) != (k.work is not None):
            raise ValueError(f"op {self.name}: kernel arguments must name its operands, "
                             f"scalars, {SIZES!r} and {WORK!r} exactly when it has a work "
                             f"array; got {unknown or arguments}")
        order = []
        for a in arguments:
            order += [n, n + 1] if a == SIZES else [where[a]]
        return itemgetter(*order) if len(order) > 1 else (lambda values: (values[order[0]],))

    def c_call(self, scalars):
        """(kernel, argument order) of the C function that runs the row with ``scalars``
        (row order): the row's kernel, or its choice by scalar ``kernel.choose_by``; None
        where the value has no choice (the reference runs)."""
        if self._choice_at is None:
            return self._calls[None]
        return self._calls.get(scalars[self._choice_at])

    def c_arguments(self, pointers, sizes, numbers, work=None):
        """The C function's arguments in ``kernel.arguments``'s order from ``pointers`` (the
        operands', row order), ``sizes`` (M, D), ``numbers`` (the scalars as
        :meth:`numbers` gives them) and ``work``."""
        return self._c_order((*pointers, *sizes, *numbers, work))

    def check_operands(self, operands, scalars=()):
        """Raise before any kernel runs unless ``operands`` (tensors or numpy arrays, None for
        an absent optional one, in row order) and ``scalars`` suit the row: each ``pair``
        given together, each named scalar one of its ``codes``, then the row's ``check``."""
        for s, value in zip(self._coded, scalars):
            if s is not None and value not in s.codes:
                raise ValueError(f"{self.name}: {s.name} must be one of "
                                 f"{', '.join(map(repr, s.codes))}, got {value!r}")
        named = dict(zip(self._operand_names, operands))
        for name, pair in self._pairs:
            if (named[name] is None) != (named[pair] is None):
                raise ValueError(f"{self.name}: {name} and {pair} are given together or "
                                 f"not at all")
        for i in self._checked:
            named[self.scalars[i].name] = scalars[i]
        if self.check is not None:
            try:
                self.check(self.name, **named)
            except AttributeError:
                error = self.expression_error(operands)
                if error is None:
                    raise
                raise error from None

    def expression_error(self, operands):
        """The TypeError naming the first operand that is an op-tree expression (a tensor was
        expected), or None when there is none."""
        for o, t in zip(self.operands, operands):
            if isinstance(t, OpNode):
                return TypeError(f"{self.name}: {o.name} is the expression {t.op}(...), not a "
                                 f"tensor; evaluate it into one first (tmp[:] = expression)")
        return None

    @property
    def dispatched(self):
        """True when the backends' method is made from this row."""
        return self.kernel is not None

    def sizes(self, operands):
        """(M, D): the rows and the last axis of operand ``kernel.sizes_of`` (the first by
        default) of ``operands`` (arrays or tensors, in row order)."""
        t = operands[self._sizes_at]
        D = int(t.shape[-1]) if len(t.shape) else 1
        return int(t.size) // max(D, 1), D

    def numbers(self, scalars):
        """The ``scalars`` (row order) as the kernels take them."""
        return tuple([convert(v) for convert, v in zip(self._converters, scalars)])

    def sample_shape(self, operand):
        """``operand``'s shape at the row's sample sizes."""
        return tuple(self.sample[d] if isinstance(d, str) else d for d in operand.shape)

    def sample_operands(self, rng, dtype, joined=True):
        """{name: numpy array} at the sample sizes (inputs random, masks 0 and 1 in turn,
        outputs zero); the optional inputs and the trailing operands (a joined residual)
        given when ``joined``; a plan operand left out (``sample_plan`` makes it), a value
        operand None."""
        out = {}
        for o in self.operands:
            if o.plan is not None:
                continue
            if o.value or not joined and (o.trailing or (o.optional and not o.written)):
                out[o.name] = None
                continue
            shape = self.sample_shape(o)
            if o.mask:
                out[o.name] = (np.arange(int(np.prod(shape))) % 2 == 0).reshape(shape) \
                    .astype(dtype)
            elif o.written and not (o.positive or o.updated):
                out[o.name] = np.zeros(shape, dtype)
            elif o.positive:
                out[o.name] = (0.5 + rng.random(shape)).astype(dtype)
            else:
                out[o.name] = rng.normal(size=shape).astype(dtype)
        return out

    def sample_scalars(self):
        return tuple(s.sample if s.sample is not None else s.default for s in self.scalars)
