"""One test harness for every backend (in the style of chainer's ``FunctionTestCase`` and neon's
``backend_pair``).

* :data:`BACKENDS` and the ``backend_name`` fixture (``conftest.py``) run a test once per
  registered backend; a backend that cannot run here (``gen_backend`` raises
  ``BackendUnavailable``) is skipped with that error's reason.  The probe runs only when a test
  asks for the backend, once per session.
* :func:`gradient_check` checks a layer's input and parameter gradients against central finite
  differences of a random linear functional of its output, in float64 on the CPU backend.
* :func:`cost_gradient_check` does the same for a cost (optionally fused with its activation).
* :func:`compare_with_cpu` runs one backend op on every available backend and compares each
  result with the CPU backend's.

Shapes follow the project's conventions: batch-first, images NHWC, sequences (N, T, D).
"""
import functools
import os
from pathlib import Path

import numpy as np
import pytest

import neonlite
from neonlite.backends import BackendUnavailable
from neonlite.layers import GeneralizedCost, Sequential
from neonlite.layers.activation import Activation

BACKENDS = ("cpu", "gpu")
#: the checkout's root (the folder of ``setup.py``, ``examples/``, ``docs/``, ``README.md``): tests
#: name checkout files from it, never by their own depth in ``tests/``
CHECKOUT = Path(__file__).resolve().parents[2]


@functools.lru_cache(maxsize=None)
def unavailable_reason(name):
    """None when backend ``name`` can be made here, else the ``BackendUnavailable`` message."""
    previous = neonlite.backends._current
    try:
        neonlite.gen_backend(name, batch_size=1)
    except BackendUnavailable as err:
        return str(err)
    finally:
        neonlite.backends._current = previous
    return None


def require_backend(name):
    """Skip the calling test (with the reason) when backend ``name`` cannot run here."""
    reason = unavailable_reason(name)
    if reason is not None:
        pytest.skip(f"backend {name!r} unavailable: {reason}")


def available_backends():
    """Names of the backends that run on this machine (always including 'cpu')."""
    return [name for name in BACKENDS if unavailable_reason(name) is None]


def make_backend(name="cpu", batch_size=4, seed=0, dtype=np.float32):
    """``gen_backend`` with the test defaults (skips the test if ``name`` is unavailable)."""
    require_backend(name)
    return neonlite.gen_backend(name, batch_size=batch_size, rng_seed=seed, datatype=dtype)


def data_dir():
    """The shared real-data folder: ``$NEONLITE_TEST_DATA`` or ``<repo>/../shared/data`` (MNIST's
    test set in ``mnist/``, Tiny Shakespeare in ``text/``; ``support.requires`` checks that the
    files a test needs are there)."""
    env = os.environ.get("NEONLITE_TEST_DATA")
    return Path(env) if env else CHECKOUT.parent / "shared" / "data"


def lenet(keep=0.5):
    """The LeNet-style network of the MNIST tests (and the benchmark's): conv 5x5x32 + ReLU,
    2x2 max pool, conv 5x5x64 + batch norm + ReLU, 2x2 max pool, fc512 + ReLU, dropout
    (``keep``), fc10 + softmax; for (28, 28, 1) images."""
    from neonlite import Model
    from neonlite.initializers import GlorotUniform, Kaiming
    from neonlite.layers import Affine, Conv, Dropout, Pooling
    from neonlite.transforms import Rectlin, Softmax
    return Model([Conv((5, 5, 32), padding=2, init=Kaiming(), activation=Rectlin()),
                  Pooling(2, strides=2, op="max"),
                  Conv((5, 5, 64), padding=2, init=Kaiming(), activation=Rectlin(),
                       batch_norm=True),
                  Pooling(2, strides=2, op="max"),
                  Affine(nout=512, init=Kaiming(), activation=Rectlin()),
                  Dropout(keep=keep),
                  Affine(nout=10, init=GlorotUniform(), activation=Softmax())])


# ---- building a single layer outside a Model ------------------------------------------------
def build(layer, in_shape):
    """Name, configure and allocate ``layer`` (wrapped in a Sequential) for examples of
    ``in_shape`` on the current backend; the wrapper computes the input error too."""
    net = layer if isinstance(layer, Sequential) else Sequential([layer])
    net.name_children()
    net.configure(tuple(in_shape))
    net.set_needs_deltas(True)
    net.allocate()
    return net


def _numeric_grad(f, arr, set_value, eps):
    """Central differences of scalar ``f()`` w.r.t. every element of host array ``arr``
    (``set_value(arr)`` pushes the perturbed array to the device)."""
    grad = np.zeros_like(arr)
    flat, gflat = arr.reshape(-1), grad.reshape(-1)
    for i in range(flat.size):
        orig = flat[i]
        flat[i] = orig + eps
        set_value(arr)
        plus = f()
        flat[i] = orig - eps
        set_value(arr)
        minus = f()
        flat[i] = orig
        gflat[i] = (plus - minus) / (2 * eps)
    set_value(arr)
    return grad


def _assert_close(name, analytic, numeric, rtol, atol):
    analytic, numeric = np.asarray(analytic), np.asarray(numeric)
    assert analytic.shape == numeric.shape, \
        f"{name}: gradient has shape {analytic.shape}, expected {numeric.shape}"
    assert np.abs(numeric).max() > 0 or np.abs(analytic).max() <= atol, \
        f"{name}: the finite-difference gradient is zero but the analytic one is not"
    np.testing.assert_allclose(analytic, numeric, rtol=rtol, atol=atol,
                               err_msg=f"{name}: analytic vs finite-difference gradient")


def gradient_check(make_layer, in_shape, batch=3, seed=0, eps=1e-6, rtol=1e-5, atol=1e-7,
                   make_input=None, before_check=None, perturb_params=0.1, inference=False):
    """Check a layer's bprop against central finite differences, in float64 on the CPU.

    ``make_layer()`` returns a fresh layer; it is configured for examples of ``in_shape`` with
    a batch of ``batch``.  The checked scalar is ``L = sum(w * y)`` for y the layer's output and
    w a fixed random array, so ``dL/dy = w`` is fed to bprop.  Both the returned input error
    and every parameter gradient (``Parameter.grad``, zeroed first) are compared with
    ``(L(v + eps) - L(v - eps)) / (2 eps)`` element by element.

    ``make_input(rng, shape)`` gives the input (default: standard normal); ``before_check(net)``
    runs after one warm-up fprop (e.g. to fix a dropout mask); parameters get Gaussian noise of
    std ``perturb_params`` so that constant initial values (zero bias, unit gamma) do not hide
    errors.  Returns the wrapper net (for further assertions).
    """
    neonlite.gen_backend("cpu", batch_size=batch, rng_seed=seed, datatype=np.float64)
    be = neonlite.get_backend()
    rng = np.random.default_rng(seed + 1000)
    net = build(make_layer(), in_shape)
    for p in net.parameters():
        if perturb_params:
            p.value.set(p.value.get() + rng.normal(0.0, perturb_params, p.value.shape))
    shape = (batch,) + tuple(in_shape)
    x = make_input(rng, shape) if make_input else rng.normal(size=shape)
    x = np.asarray(x, dtype=np.float64)
    x_t = be.array(x)
    y0 = net.fprop(x_t, inference).get()
    if before_check is not None:
        before_check(net)
    w = rng.normal(size=y0.shape)
    w_t = be.array(w)

    def loss():
        return float(np.sum(w * net.fprop(x_t, inference).get()))

    for p in net.parameters():
        p.grad[:] = 0.0
    net.fprop(x_t, inference)
    dx = net.bprop(w_t).get()
    analytic = {p.name: p.grad.get() for p in net.parameters()}
    assert len(set(analytic)) == len(net.parameters()), "parameter names must be distinct"

    _assert_close("input", dx, _numeric_grad(loss, x.copy(), x_t.set, eps), rtol, atol)
    for p in net.parameters():
        value = p.value.get()
        numeric = _numeric_grad(loss, value, p.value.set, eps)
        _assert_close(p.name, analytic[p.name], numeric, rtol, atol)
    return net


def cost_gradient_check(costfunc, out_shape, make_targets, batch=4, seed=0, eps=1e-6,
                        rtol=1e-5, atol=1e-8, activation=None, make_input=None):
    """Check a cost's gradient against finite differences of its value, in float64.

    Without ``activation`` the input is the cost's input y directly; with one (e.g. Softmax or
    Logistic) the input is that activation's input, so the fused path (the cost fusing its
    gradient with the activation) is what gets checked.  ``make_targets(rng, shape)`` returns
    the targets (batch,) + ``out_shape``.  Returns the GeneralizedCost (for its ``fused_layer``).
    """
    neonlite.gen_backend("cpu", batch_size=batch, rng_seed=seed, datatype=np.float64)
    be = neonlite.get_backend()
    rng = np.random.default_rng(seed + 2000)
    shape = (batch,) + tuple(out_shape)
    x = np.asarray(make_input(rng, shape) if make_input else rng.normal(size=shape),
                   dtype=np.float64)
    x_t, t_t = be.array(x), be.array(make_targets(rng, shape))
    cost = GeneralizedCost(costfunc)
    layer = None
    if activation is not None:
        layer = build(Activation(activation), out_shape).layers[0]
    cost.initialize(layer, out_shape, be)

    def forward():
        return layer.fprop(x_t) if layer is not None else x_t

    def value():
        return cost.cost(forward(), t_t)

    returned, delta = cost.cost_and_errors(forward(), t_t)
    np.testing.assert_allclose(returned, value(), rtol=1e-12,
                               err_msg="cost_and_errors returns a different cost than cost()")
    grad = (layer.bprop(delta) if layer is not None else delta).get()
    _assert_close("cost input", grad, _numeric_grad(value, x.copy(), x_t.set, eps), rtol, atol)
    return cost


# ---- backend ops on every backend -------------------------------------------------------------
def compare_with_cpu(op, *inputs, rtol=1e-5, atol=1e-6, dtype=np.float32, batch_size=4, seed=0):
    """Run ``op(be, *tensors)`` on every available backend and compare with the CPU result.

    ``inputs`` are host arrays, copied to each backend as tensors (integer and uint16 arrays
    keep their dtype; others take ``dtype``).  ``op`` returns a tensor, a host value or a
    tuple of them.  Returns the CPU results as host arrays (a tuple when ``op`` returns one).
    """
    results = {}
    for name in available_backends():
        be = neonlite.gen_backend(name, batch_size=batch_size, rng_seed=seed, datatype=dtype)
        tensors = [be.array(a, dtype=(np.asarray(a).dtype if np.asarray(a).dtype.kind in "ui"
                                      else dtype)) for a in inputs]
        out = op(be, *tensors)
        be.synchronize()
        results[name] = tuple(_host(o) for o in out) if isinstance(out, tuple) else _host(out)
    reference = results["cpu"]
    for name, result in results.items():
        if name == "cpu":
            continue
        pairs = zip(result, reference) if isinstance(reference, tuple) else [(result, reference)]
        for got, want in pairs:
            np.testing.assert_allclose(got, want, rtol=rtol, atol=atol,
                                       err_msg=f"backend {name!r} differs from the CPU backend")
    return reference


def _host(value):
    return value.get() if hasattr(value, "get") and hasattr(value, "backend") else np.asarray(value)
