"""The check of integer class-index targets that both backends and the softmax reference run
before reading them."""
import numpy as np


def check_class_indices(idx, nclass, what="target"):
    """Raise IndexError naming the first entry of integer array ``idx`` outside
    [0, nclass), with its position in ``idx``."""
    idx = np.asarray(idx)
    bad = np.flatnonzero((idx < 0) | (idx >= nclass))
    if bad.size:
        where = tuple(int(i) for i in np.unravel_index(bad[0], idx.shape))
        raise IndexError(f"{what} class index {int(idx.reshape(-1)[bad[0]])} at position "
                         f"{where[0] if len(where) == 1 else where} is out of range; expected "
                         f"0 <= index < {nclass} ({bad.size} bad of {idx.size})")
