"""The pretrained-model options on the GPU backend's own code with the device replaced by the
host emulator: a padded BERT-form encoder (segment embeddings, post-norm bias-free blocks,
mean pooling, L2 normalisation; or BERT's pooler), a tied GPT-2-form decoder and one of RMSNorm
blocks, forward and backward against the CPU backend.  This checks the GPU glue, not speed (not
run on a GPU)."""
import numpy as np
import pytest
from support.gpu_host_backend import host_gpu_backend
from support.requires import requires

import neonlite
from neonlite import Model
from neonlite.initializers import Gaussian
from neonlite.layers import (Affine, Embedding, FirstToken, L2Normalize, LayerNorm, MeanPool,
                             PositionalEmbedding, RMSNorm, SegmentEmbedding, TiedLinear,
                             TransformerBlock)
from neonlite.serialize import ShapeStub
from neonlite.transforms import Tanh

pytestmark = requires("emulator")


@pytest.fixture
def restore_backend():
    previous = neonlite.backends._current
    yield
    neonlite.backends._current = previous


def _encoder():
    return [Embedding(13, 8, pad_id=0, name="tok"), PositionalEmbedding(6, 8),
            SegmentEmbedding(2, 8), LayerNorm(1e-12),
            TransformerBlock(8, 2, causal=False, norm="post", eps=1e-12, bias=False,
                             init=Gaussian(scale=0.3)),
            MeanPool(), L2Normalize()]


def _pooler():
    """BERT's pooler head: the [CLS] state through a dense tanh layer."""
    return _encoder()[:-2] + [FirstToken(), Affine(8, activation=Tanh())]


def _decoder():
    return [Embedding(13, 8, name="wte"), PositionalEmbedding(6, 8),
            TransformerBlock(8, 2, gelu="tanh", init=Gaussian(scale=0.3)), LayerNorm(),
            TiedLinear("wte")]


def _rms_decoder():
    """Llama-style: RMSNorm blocks (pre- and post-norm) and a final RMSNorm."""
    return [Embedding(13, 8, name="wte"), PositionalEmbedding(6, 8),
            TransformerBlock(8, 2, norm_type="rms", bias=False, init=Gaussian(scale=0.3)),
            TransformerBlock(8, 2, norm_type="rms", norm="post", init=Gaussian(scale=0.3)),
            RMSNorm(), TiedLinear("wte")]


def _run(be, layers, ids, err):
    neonlite.backends._current = be
    model = Model(layers())
    model.initialize(ShapeStub((6,), "ids"))
    rng = np.random.default_rng(1)
    model.set_params({k: rng.normal(scale=0.3, size=v.shape).astype(v.dtype)
                      if v.dtype.kind == "f" else v for k, v in model.get_params().items()})
    model.zero_grads()
    y = model.fprop(be.array(ids)).get()
    model.bprop(be.array(err))
    return y, [p.grad.get() for p in model.parameters()]


@pytest.mark.parametrize("layers", [_encoder, _decoder, _pooler, _rms_decoder])
def test_options_match_the_cpu(monkeypatch, restore_backend, layers):
    ids = np.array([[3, 5, 7, 2, 0, 0], [1, 4, 4, 9, 12, 6]], dtype=np.float32)
    out_shape = (2, 6, 13) if layers in (_decoder, _rms_decoder) else (2, 8)
    err = np.random.default_rng(0).normal(size=out_shape)
    gpu = _run(host_gpu_backend(monkeypatch, batch_size=2), layers, ids, err)
    cpu = _run(neonlite.gen_backend("cpu", batch_size=2, rng_seed=0), layers, ids, err)
    np.testing.assert_allclose(gpu[0], cpu[0], rtol=0, atol=2e-4)
    for g, c in zip(gpu[1], cpu[1]):
        np.testing.assert_allclose(g, c, rtol=0, atol=2e-4 * max(1.0, np.abs(c).max()))
