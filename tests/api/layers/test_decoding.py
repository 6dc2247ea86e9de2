"""Incremental decoding is one protocol: ``layer.init_decode(batch, max_len)`` and
``layer.decode(x, state)``, methods of every layer (``layers/layer.py``), implemented by each
layer that can decode and by the containers; ``layers/decode.py`` dispatches on nothing."""
import ast
import inspect

import numpy as np
import pytest
from support.import_graph import ROOT

import neonlite
from neonlite import Model, layers
from neonlite.layers import Activation, Affine, Dropout, Embedding, Linear, Sequential
from neonlite.layers.layer import Layer
from neonlite.transforms import Softmax


class _Tokens:
    shape, name = (6,), "tokens"


def _lm():
    neonlite.gen_backend("cpu", batch_size=2, rng_seed=0, datatype=np.float64)
    model = Model([Embedding(11, 8, name="emb"), Affine(8, activation=neonlite.transforms.Tanh(),
                                                         name="hidden"),
                   Dropout(0.9, name="drop"), Linear(11, name="head"),
                   Activation(Softmax(), name="softmax")])
    model.initialize(_Tokens())
    return model


def test_a_container_decodes_through_its_layers_methods():
    """Each position decoded alone gives the whole-sequence output at that position."""
    model = _lm()
    be = model.be
    ids = np.random.default_rng(0).integers(0, 11, size=(2, 6)).astype(np.float64)
    whole = model.fprop(be.array(ids), inference=True).get()
    state = model.layers.init_decode(2, 6)
    x = be.zeros((2, 1))
    for t in range(6):
        x.set(ids[:, t:t + 1])
        np.testing.assert_allclose(model.layers.decode(x, state).get()[:, 0], whole[:, t],
                                   rtol=1e-12, atol=1e-12)


def test_a_layer_without_a_decoding_path_says_which():
    class Doubling(Layer):
        def fprop(self, x, inference=False):
            return x

    model = _lm()
    extra = Sequential([Doubling(name="doubling")])
    extra.be = model.be
    with pytest.raises(TypeError, match="layer 'doubling' \\(Doubling\\) has no incremental "
                                        "decoding path"):
        extra.init_decode(1, 4)


def test_every_layer_implements_both_methods_or_neither():
    """A layer class that defines one of the protocol's methods defines the other."""
    half = []
    for name, cls in vars(layers).items():
        if not inspect.isclass(cls) or not issubclass(cls, Layer):
            continue
        has_init = any("init_decode" in vars(k) for k in cls.__mro__ if k is not Layer)
        has_decode = any("decode" in vars(k) for k in cls.__mro__ if k is not Layer)
        if has_init != has_decode:
            half.append(name)
    assert not half, f"layers with half of the decoding protocol: {half}"


def test_the_decode_module_dispatches_on_nothing():
    """No ``isinstance`` or ``hasattr`` chain in ``layers/decode.py``: each layer answers for
    itself."""
    tree = ast.parse((ROOT / "layers" / "decode.py").read_text())
    calls = sorted({node.func.id for node in ast.walk(tree) if isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Name)
                    and node.func.id in ("isinstance", "issubclass", "hasattr", "getattr")})
    assert not calls, f"layers/decode.py dispatches on the layer's type: {calls}"
