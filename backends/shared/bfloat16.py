"""bfloat16 as uint16 bit patterns on the host: the element type both backends' bf16 tensors
carry (:data:`BFLOAT16`), and the conversions the tensors' ``get``/``set``, the CPU backend's
bf16 boundary and the op-tree reference's ``bf16_to_f32`` / ``f32_to_bf16`` nodes share.

numpy has no bfloat16: a bf16 tensor's ``dtype`` is :data:`BFLOAT16`, numpy's uint16 carrying
``{"bfloat16": True}`` metadata (which views, slices and reshapes keep).  A plain uint16 array
(Adam's bf16 moment states) is integers; only :data:`BFLOAT16` says the bits are values."""
import math

import numpy as np

#: the dtype of bf16 tensors: uint16 bit patterns flagged as bfloat16
BFLOAT16 = np.dtype(np.uint16, metadata={"bfloat16": True})
#: the names a dtype argument may give bfloat16 by
NAMES = ("bf16", "bfloat16")


def is_bf16(dtype):
    """True for :data:`BFLOAT16` and the names 'bf16' / 'bfloat16' (not for a plain uint16)."""
    if isinstance(dtype, str):
        return dtype.lower() in NAMES
    return isinstance(dtype, np.dtype) and bool((dtype.metadata or {}).get("bfloat16"))


def as_dtype(dtype):
    """numpy dtype for a dtype argument ('bf16' and 'bfloat16' give :data:`BFLOAT16`)."""
    return BFLOAT16 if is_bf16(dtype) else np.dtype(dtype)


def bf16_to_f32(bits):
    """uint16 bfloat16 bit patterns -> float32 values."""
    return (np.asarray(bits).astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16(values):
    """float32 values -> uint16 bfloat16 bit patterns, rounding to nearest even (NaN kept NaN)."""
    f = np.ascontiguousarray(values, dtype=np.float32)
    bits = f.view(np.uint32)
    rounded = (bits + np.uint32(0x7FFF) + ((bits >> 16) & np.uint32(1))) >> 16
    rounded = np.where(np.isnan(f), np.uint32(0x7FC0), rounded)
    return rounded.astype(np.uint16)


def scalar_bits(value):
    """One float32 value (a Python or numpy scalar) -> its bfloat16 bit pattern as an int,
    rounded as :func:`f32_to_bf16` rounds, without making arrays (+0.0, most fills, at
    once)."""
    if value == 0 and math.copysign(1.0, value) > 0:
        return 0
    f = np.float32(value)
    if f != f:
        return 0x7FC0
    u = int(f.view(np.uint32))
    return (u + 0x7FFF + ((u >> 16) & 1)) >> 16


def holds_integers(dtype):
    """True for an integer dtype (class indices, ids), False for a float one and for
    :data:`BFLOAT16`, whose uint16 bits are float values."""
    dtype = as_dtype(dtype)
    return dtype.kind in "iu" and not is_bf16(dtype)
