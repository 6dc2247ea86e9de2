"""How a float32 master weight becomes its bfloat16 copy: to nearest even
(:func:`~.bfloat16.f32_to_bf16`) or stochastically, the numpy reference of
``kernels/cpu/bf16_stochastic.h`` (the same bits).

Stochastic rounding adds 16 random bits to the float32 bit pattern and keeps the upper half, so
a value rounds to the next bf16 magnitude with probability (its low 16 bits) / 2^16: the copy
equals the master in expectation, and small updates that round-to-nearest would drop on every
step still move the copy on average.  The random bits are a counter-based hash of (seed, step,
parameter ordinal, element index): no generator state, the same bits on any thread count and
after a resume.  One hash, SplitMix64's finalizer of (key ^ index // 4), gives four elements
their 16 bits each (element ``index`` takes bits ``16 * (index % 4)`` and up).
"""
import numpy as np

from .bfloat16 import f32_to_bf16

_MASK = (1 << 64) - 1


def _mix64(z):
    """SplitMix64's finalizer of ``z`` (uint64 array or Python int), wrapping modulo 2^64."""
    if isinstance(z, int):
        z = (z + 0x9E3779B97F4A7C15) & _MASK
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
        return z ^ (z >> 31)
    with np.errstate(over="ignore"):
        z = z + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def round_key(seed, step, ordinal):
    """The key of parameter number ``ordinal``'s elements at optimizer step ``step``."""
    return _mix64(_mix64(_mix64(int(seed) & _MASK) ^ (int(step) & _MASK)) ^
                  (int(ordinal) & _MASK))


def random_bits(key, count, first=0):
    """The 16 random bits (uint32 values < 2^16) of element indices ``first`` ..
    ``first + count - 1`` under ``key``."""
    index = np.arange(first, first + count, dtype=np.uint64)
    j0 = first >> 2
    words = _mix64(np.arange(j0, ((first + count - 1) >> 2) + 1 if count else j0,
                             dtype=np.uint64) ^ np.uint64(key))
    word = words[(index >> np.uint64(2)) - np.uint64(j0)]
    shift = np.uint64(16) * (index & np.uint64(3))
    return ((word >> shift) & np.uint64(0xFFFF)).astype(np.uint32)


def f32_to_bf16_stochastic(values, key, first=0):
    """float32 ``values`` -> uint16 bfloat16 bit patterns rounded stochastically with the
    random bits of their flat indices (from ``first``) under ``key``; NaN -> 0x7FC0."""
    f = np.ascontiguousarray(values, dtype=np.float32)
    bits = f.reshape(-1).view(np.uint32)
    rounded = (bits + random_bits(key, bits.size, first)) >> np.uint32(16)
    rounded = np.where(np.isnan(f.reshape(-1)), np.uint32(0x7FC0), rounded)
    return rounded.astype(np.uint16).reshape(f.shape)


def round_to_bf16(values, rounding="nearest", key=0):
    """``values`` (float32) as bf16 bits, rounded as ``rounding`` (``"nearest"`` or
    ``"stochastic"``) says; ``key``: :func:`round_key`'s, for stochastic rounding."""
    if rounding == "stochastic":
        return f32_to_bf16_stochastic(values, key)
    return f32_to_bf16(values)
