"""bfloat16 as uint16 bit patterns on the host: the conversions the GPU tensor's ``get``/``set``
and the op-tree reference's ``bf16_to_f32`` / ``f32_to_bf16`` nodes share."""
import numpy as np


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
