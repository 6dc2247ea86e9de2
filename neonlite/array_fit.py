"""Keras-style arrays for ``Model.fit``: ``model.fit(X, y=labels, validation_split=0.2, ...)``.

A convenience over the data sets ``fit`` takes, not a second API: the arrays become two
:class:`~neonlite.data.ArrayIterator` s, the training part shuffled each epoch, and the
validation part is evaluated after every epoch as ``Callbacks(model, eval_set=...)`` does.
As in Keras, the validation part is the *last* ``validation_split`` of the examples, taken
before any shuffling.
"""
import numbers

import numpy as np

from .data import ArrayIterator
from .data.iterator import DataError


def array_datasets(model, X, y, validation_split, nclass):
    """``(train, valid)`` iterators over arrays ``X`` (N, ...) and ``y`` (N,) class indices
    or (N, ...) targets (None: ``X`` itself, for autoencoders); ``valid`` is None without a
    ``validation_split`` (a fraction in (0, 1)).  ``nclass`` defaults, for whole-number
    labels (N,), to the width of the model's output."""
    if hasattr(X, "batches") or not isinstance(X, (np.ndarray, list, tuple)):
        raise DataError("Model.fit: y= and validation_split= go with an array X (N, ...); a "
                        "data set brings its own targets (split it into a validation set and "
                        "pass Callbacks(model, eval_set=valid))")
    X = np.asarray(X)
    y = None if y is None else np.asarray(y)
    if y is not None and (y.ndim == 0 or len(y) != len(X)):
        raise DataError(f"Model.fit: X has {len(X)} examples but y has shape {y.shape}")
    cut = len(X)
    if validation_split is not None:
        if not isinstance(validation_split, numbers.Real) or \
                isinstance(validation_split, bool) or not 0.0 < validation_split < 1.0:
            raise DataError(f"Model.fit: validation_split must be a fraction in (0, 1), got "
                            f"{validation_split!r}")
        cut = int(len(X) * (1.0 - validation_split))
        if not 0 < cut < len(X):
            raise DataError(f"Model.fit: validation_split={validation_split} of {len(X)} "
                            f"examples leaves {'no training' if cut <= 0 else 'no validation'}"
                            f" example")
    if nclass is None and y is not None and y.ndim == 1 and y.dtype.kind in "ui":
        nclass = _output_width(model, X.shape[1:])
    train = ArrayIterator(X[:cut], None if y is None else y[:cut], nclass=nclass,
                          shuffle=True, name="train")
    valid = None if cut == len(X) else ArrayIterator(
        X[cut:], None if y is None else y[cut:], nclass=nclass, shuffle=False,
        name=f"last {len(X) - cut} of {len(X)} (validation_split={validation_split})")
    return train, valid


def _output_width(model, example_shape):
    """The size of the last axis of the model's output for examples of ``example_shape``."""
    out_shape = model.out_shape if model.in_shape is not None else \
        model.layers.configure(tuple(example_shape))
    return int(out_shape[-1])
