"""GELU, x * Phi(x), written as op-trees of the backend contract: what the GPU backend's
``gelu`` and ``gelu_bprop`` run (``gpu/gelu.py``; its code generator fuses them), and the
``Gelu`` transform.  ``approximate``: ``"none"`` (the exact erf form) or
``"tanh"`` (0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))).  Tensors of any shape."""
import math

SQRT_HALF = math.sqrt(0.5)
INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
TANH_K = math.sqrt(2.0 / math.pi)
APPROXIMATIONS = ("none", "tanh")


def check_approximate(approximate, where="gelu"):
    if approximate not in APPROXIMATIONS:
        raise ValueError(f"{where}: approximate must be 'none' or 'tanh', got {approximate!r}")


def fprop(be, x, out, approximate="none"):
    """out = gelu(x)."""
    if approximate == "tanh":
        out[:] = 0.5 * x * (1.0 + be.tanh(TANH_K * (x + 0.044715 * x * x * x)))
    else:
        out[:] = 0.5 * x * (1.0 + be.erf(x * SQRT_HALF))


def bprop(be, x, dy, dx, approximate="none"):
    """dx = dy * gelu'(x) (``dx`` may be ``dy``)."""
    if approximate == "tanh":
        t = be.tanh(TANH_K * (x + 0.044715 * x * x * x))
        dx[:] = dy * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * TANH_K
                      * (1.0 + 3 * 0.044715 * x * x))
    else:
        dx[:] = dy * (0.5 * (1.0 + be.erf(x * SQRT_HALF))
                      + x * be.exp(-0.5 * x * x) * INV_SQRT_2PI)
