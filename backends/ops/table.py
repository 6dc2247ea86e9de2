"""The op table's row type: one :class:`Op` describes one backend op once (its operands, the
operand check, the numpy reference, the C and CUDA kernels that implement it, its cost, and
the sample sizes the per-op tests run it at).  The rows live in one module per family
(``linear.py``, ``norm.py``, ``softmax.py``, ``elementwise.py``, ``blocksparse.py``,
``recurrent.py``); ``__init__.py`` gathers them into :data:`~neonlite.backends.ops.OPS`.

A row with ``kernel`` set is *dispatched by the table*: the backend contract's method is made
from the row (``dispatch.py``), the CPU backend calls C function ``kernel.c_symbol`` of
``kernels/cpu/<kernel.c_source>.c`` (else runs ``reference``), and the GPU backend launches
``kernel.launches`` of CUDA variant ``kernel.cuda_variant``.  Every kernel takes the operand
pointers in the row's order (an absent optional operand as NULL), then the ``sizes`` (rows M
and last axis of the operand ``kernel.sizes_of``, the first by default, as ``int64_t`` /
``int``), then the scalars (``double`` / ``float`` and ``int``; a scalar with ``codes`` is
given by name and passed as its code).  A row whose kernel has ``arguments="plan"`` takes a
plan first (an operand with ``plan`` set, made once at configure time, such as
``blocksparse_layer``'s): its arguments are the plan's (tables, work arrays, sizes), so the
backend's section file of the family makes them (the CPU backend's ``PLAN_CALLS``, the GPU
backend's ``PLAN_LAUNCHES``, by op name), and the GPU launches take the ``arg_format`` and the
grid the section file gives.  A row whose kernel has ``arguments="call"`` is run whole by its
family's section file (the CPU backend's ``OP_CALLS``, the GPU backend's ``OP_LAUNCHES``, by
op name): the section runs the row's check, then chooses its kernel entry point, tiles, work
arrays, staging and kept calls from the operands (the CPU one answers False for a case its
kernels do not take, and the row's reference runs); its rows may take ``value`` operands (a
dropout stream, a block layout) and ``trailing`` scalars.  Rows without ``kernel`` are ops
whose backends make real choices (algorithms, tiles, plans) in their section files; the row
still gives their cost and reference, and the per-op tests and the profiler read it.
"""
from dataclasses import dataclass, field

import numpy as np

#: the kinds of scalar arguments a dispatched kernel takes
SCALAR_KINDS = ("int", "float")
#: how a GPU launch covers its operands: one thread per element of the first operand, one
#: block per row (M rows), one thread per column (the last axis)
GRIDS = ("elements", "rows", "columns", "plan")
#: how a dispatched kernel's arguments are made: the standard ones (operand pointers, sizes,
#: scalars), by the family's section file from the row's plan, or the whole call run by the
#: family's section file (see the module docstring)
ARGUMENTS = ("rows", "plan", "call")


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
    the kernel's ``arguments`` are ``"plan"``."""
    function: str
    grid: str = "elements"
    threads: int = 256
    arg_format: str = None


@dataclass(frozen=True)
class Kernel:
    """The compiled code of a dispatched op: C function ``c_symbol`` of
    ``kernels/cpu/<c_source>.c`` and the CUDA ``launches`` of variant ``cuda_variant``; the
    sizes they take are those of operand ``sizes_of`` (None: the first); ``arguments``: one of
    :data:`ARGUMENTS` (see the module docstring)."""
    c_source: str
    c_symbol: str
    cuda_variant: str
    launches: tuple
    sizes_of: str = None
    arguments: str = "rows"


@dataclass(frozen=True)
class Op:
    """One backend op (see the module docstring).

    Attributes:
        name (str): the backend method.
        family (str): the row module it lives in.
        doc (str): what it computes (the contract's docstring).
        cost (callable): ``cost(*args, **kwargs) -> (flops, bytes)`` (``costs.py``).
        operands (tuple): :class:`Operand` s, in call order (dispatched rows).
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
        if self.kernel.arguments not in ARGUMENTS:
            raise ValueError(f"op {self.name}: kernel arguments must be one of {ARGUMENTS}, "
                             f"got {self.kernel.arguments!r}")
        if self.kernel.sizes_of is not None and self.kernel.sizes_of not in names:
            raise ValueError(f"op {self.name}: sizes_of names no operand: "
                             f"{self.kernel.sizes_of!r}")
        object.__setattr__(self, "_sizes_at", 0 if self.kernel.sizes_of is None
                           else names.index(self.kernel.sizes_of))
        object.__setattr__(self, "c_symbols", (f"{self.kernel.c_source}:"
                                               f"{self.kernel.c_symbol}",))
        object.__setattr__(self, "cuda_functions", tuple(
            f"{self.kernel.cuda_variant}:{l.function}" for l in self.kernel.launches))

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
            self.check(self.name, **named)

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
