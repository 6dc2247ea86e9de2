"""Matrix products on numpy arrays, the reference of ``Backend.compound_dot`` (2-D) and
``batched_dot`` (3-D, batch first): C = alpha * op(A) @ op(B) + beta * C, op transposing the
last two axes when asked (beta 0 overwrites C, so old NaNs do not survive)."""
import numpy as np


def _product(A, B, C, alpha, beta, transA, transB):
    a = np.swapaxes(A, -1, -2) if transA else A
    b = np.swapaxes(B, -1, -2) if transB else B
    value = alpha * np.matmul(a, b)
    if beta:
        value = value + beta * C
    np.copyto(C, value)


def compound_dot(A, B, C, alpha=1.0, beta=0.0, transA=False, transB=False):
    _product(A, B, C, alpha, beta, transA, transB)


def batched_dot(A, B, C, alpha=1.0, beta=0.0, transA=False, transB=False):
    _product(A, B, C, alpha, beta, transA, transB)
