"""Inference on one model from several threads gives exactly the serial results.

A model's layers keep one output buffer each (made at ``allocate``), so two threads running
``fprop`` through the same model write the same buffers; ``Model.predict`` / ``get_outputs``
/ ``eval`` / ``generate`` take the model's inference lock, so each call sees only its own
batches.  8 threads x 50 predictions, each compared bit for bit with the serial one.
"""
import threading

import numpy as np

import neonlite
from neonlite import Model
from neonlite.data import ArrayIterator
from neonlite.layers import Affine, Conv, Pooling
from neonlite.transforms import Misclassification, Rectlin, Softmax, Tanh
from neonlite.initializers import Gaussian

THREADS, CALLS = 8, 50


def _model():
    neonlite.gen_backend("cpu", batch_size=8, rng_seed=0)
    init = Gaussian(scale=0.3)
    model = Model([Conv((3, 3, 6), init=init, activation=Rectlin(), padding=1),
                   Pooling(2), Affine(nout=32, init=init, activation=Tanh()),
                   Affine(nout=10, init=init, activation=Softmax())])
    model.initialize(ArrayIterator(np.zeros((8, 8, 8, 3), np.float32), shuffle=False))
    return model


def _inputs(count):
    rng = np.random.default_rng(1)
    return [rng.standard_normal((int(rng.integers(1, 20)), 8, 8, 3)).astype(np.float32)
            for _ in range(count)]


def _run_threads(work):
    """Run ``work(thread index)`` on THREADS threads started together; re-raise any error."""
    barrier, errors = threading.Barrier(THREADS), []

    def body(index):
        try:
            barrier.wait()
            work(index)
        except BaseException as err:  # noqa: BLE001 (re-raised in the main thread)
            errors.append(err)
    threads = [threading.Thread(target=body, args=(i,)) for i in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]


def test_predict_from_8_threads_equals_the_serial_results():
    model = _model()
    inputs = _inputs(THREADS * CALLS)
    serial = [model.predict(x) for x in inputs]
    got = [None] * len(inputs)

    def work(index):
        for k in range(index, len(inputs), THREADS):
            got[k] = model.predict(inputs[k])
    _run_threads(work)
    differing = [k for k in range(len(inputs)) if not np.array_equal(got[k], serial[k])]
    assert not differing, f"{len(differing)} of {len(inputs)} predictions differ from the " \
        f"serial ones"


def test_eval_from_8_threads_equals_the_serial_value():
    model = _model()
    rng = np.random.default_rng(2)
    sets = [ArrayIterator(rng.standard_normal((24, 8, 8, 3)).astype(np.float32),
                          rng.integers(0, 10, 24).astype(np.int32), nclass=10,
                          shuffle=False) for _ in range(THREADS)]
    serial = [model.eval(s, Misclassification()) for s in sets]
    got = [None] * THREADS

    def work(index):
        for _ in range(CALLS // 10):
            value = model.eval(sets[index], Misclassification())
            assert value == serial[index]
        got[index] = value
    _run_threads(work)
    assert got == serial


def test_first_use_from_8_threads_initializes_once():
    """Threads that call ``predict`` on a model nobody initialized yet all get the result of
    one initialization (the same parameters)."""
    neonlite.gen_backend("cpu", batch_size=8, rng_seed=0)
    model = Model([Affine(nout=5, init=Gaussian(scale=0.3), activation=Tanh())])
    x = np.random.default_rng(3).standard_normal((13, 7)).astype(np.float32)
    got = [None] * THREADS
    _run_threads(lambda index: got.__setitem__(index, model.predict(x)))
    for value in got[1:]:
        assert np.array_equal(value, got[0])
    assert np.array_equal(model.predict(x), got[0])
