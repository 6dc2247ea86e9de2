"""Operand checks run before a kernel that takes raw pointers: the kernels take their sizes
from a plan or one operand and trust every other pointer, so an operand of another size would
be read or written past its end (on the CPU, glibc then aborts Python), and one of another
element type would be read as garbage.  :func:`check_operand_sizes` is the element-count
check of the row-wise kernels (batch norm, layer norm, the fused softmax + cross-entropy);
:func:`check_operands` and :func:`check_rank` the shape, count and element-type checks the
other ops' expected shapes (``operand_shapes.py``) go through.  Shared by the CPU and GPU
backends."""
import math

import numpy as np


def check_operand_sizes(op, x, width, whole=(), rows=(), columns=(), free=()):
    """Raise ValueError naming ``op``, the operand and both sizes unless each (name, tensor)
    of ``whole`` has x's element count, of ``rows`` one element per row of x (M = x.size /
    width) and of ``columns`` ``width`` elements; a None tensor is absent and passes.  Then
    TypeError unless x is floating and every operand but those named in ``free`` has its
    element type (the kernels read every pointer as x's type)."""
    width = int(width)
    M = x.size // max(width, 1)
    for group, count, what in ((whole, x.size, "as many as x"), (rows, M, "one per row of x"),
                               (columns, width, "one per column of x")):
        for name, t in group:
            if t is not None and t.size != count:
                raise ValueError(f"{op}: {name} has {t.size} elements (shape {tuple(t.shape)}); "
                                 f"expected {count}, {what} (x has shape {tuple(x.shape)}: "
                                 f"{M} rows of {width})")
    check_operands(op, [(name, t, ()) for group in (whole, rows, columns) for name, t in group],
                   like=("x", x), exact=(), free=free, sizes=False)


def element_type(t):
    """What a kernel reads an operand as: its storage code on the GPU ('f32', 'bf16', ...),
    else its numpy dtype."""
    storage = getattr(t, "storage", None)
    return storage if isinstance(storage, str) else np.dtype(t.dtype)


def _type_name(t):
    """An operand's element type as a dtype name (GPU bfloat16 storage: ``bfloat16``)."""
    return "bfloat16" if getattr(t, "storage", None) == "bf16" else np.dtype(t.dtype).name


def check_contiguous(op, **operands):
    """ValueError naming ``op`` and the first operand (None: absent) that is a strided view:
    the GPU kernels read and write every operand as flat rows."""
    for name, t in operands.items():
        if t is not None and not t.is_contiguous:
            raise ValueError(f"{op}: {name} is a non-contiguous view (shape {tuple(t.shape)}, "
                             f"element strides {tuple(t.strides)}); the GPU kernels take "
                             f"contiguous operands")


def check_rank(op, name, t, rank):
    """ValueError unless tensor ``t`` (operand ``name`` of ``op``) has ``rank`` axes (an int,
    or a tuple of the ranks taken)."""
    ranks = rank if isinstance(rank, tuple) else (rank,)
    if len(t.shape) not in ranks:
        raise ValueError(f"{op}: {name} has shape {tuple(t.shape)}; expected "
                         f"{' or '.join(map(str, ranks))} axes")


def check_operands(op, expected, like=None, exact=(), free=(), note="", sizes=True):
    """Raise ValueError naming ``op``, the operand, its shape and the expected shape unless
    each (name, tensor, shape tuple) of ``expected`` has that shape (``exact``: True, or the
    names held to it) or else that many elements; a None tensor is absent and passes.
    ``like`` (name, tensor): every other operand (but the names in ``free``) must have its
    element type, a floating one (TypeError otherwise).  ``note`` (a string, or a function
    giving one, called only for a message) ends the messages: where the expected shapes come
    from.  ``sizes`` False checks the element types only.  Cheap when everything matches: a
    comparison per operand."""
    for name, t, shape in expected if sizes else ():
        if t is None:
            continue
        if exact is True or name in exact:
            if tuple(t.shape) != shape:
                raise ValueError(f"{op}: {name} has shape {tuple(t.shape)}; expected "
                                 f"{shape}{_text(note)}")
        elif t.size != math.prod(shape):
            raise ValueError(f"{op}: {name} has shape {tuple(t.shape)} ({t.size} elements); "
                             f"expected {shape} ({math.prod(shape)} elements){_text(note)}")
    if like is None:
        return
    like_name, like_t = like
    kind = element_type(like_t)
    if not (kind in ("f16", "bf16", "f32") if isinstance(kind, str) else kind.kind == "f"):
        raise TypeError(f"{op}: {like_name} has dtype {_type_name(like_t)}; expected a "
                        f"floating type")
    for name, t, _ in expected:
        if t is not None and t is not like_t and element_type(t) != kind and name not in free:
            raise TypeError(f"{op}: {name} has dtype {_type_name(t)}; expected "
                            f"{_type_name(like_t)}, the dtype of {like_name}")


def _text(note):
    return note() if callable(note) else note
