"""The transformer options pretrained models need: post-norm blocks, bias-free layers, tied
input/output embeddings (one parameter, both gradients), segment embeddings, padding
invariance, mean pooling and L2 normalisation; float64 finite-difference gradient checks."""
import numpy as np
import pytest
from support.harness import _assert_close, _numeric_grad, gradient_check

import neonlite
from neonlite import Model
from neonlite.config.errors import ConfigError
from neonlite.initializers import Gaussian
from neonlite.layers import (Activation, Affine, Embedding, FirstToken, L2Normalize, LayerNorm,
                             MeanPool, MultiHeadAttention, PositionalEmbedding,
                             SegmentEmbedding, TiedLinear, TransformerBlock)
from neonlite.serialize import ShapeStub


def _block(**kw):
    return lambda: TransformerBlock(6, 2, mlp_ratio=2, init=Gaussian(scale=0.4), **kw)


@pytest.mark.parametrize("causal", [False, True])
def test_post_norm_block_gradients(causal):
    net = gradient_check(_block(norm="post", causal=causal, eps=1e-12), (4, 6), batch=2)
    block = net.layers[0]
    assert block.ln1.eps == 1e-12 and block.sublayers[0] is block.attn


def test_bias_free_block_gradients():
    net = gradient_check(_block(bias=False, gelu="tanh"), (3, 6), batch=2)
    names = sorted(p.name.split(".", 1)[1] for p in net.parameters())
    assert names == ["attn.Wk", "attn.Wo", "attn.Wq", "attn.Wv", "fc1.W", "fc2.W", "ln1.gamma",
                     "ln2.gamma"]


def test_bias_free_post_norm_block_gradients():
    gradient_check(_block(bias=False, norm="post"), (3, 6), batch=2)


def test_bias_free_layernorm_and_attention():
    net = gradient_check(lambda: LayerNorm(bias=False), (3, 5), batch=2)
    assert [p.name for p in net.parameters()] == ["LayerNorm_0.gamma"]
    net = gradient_check(lambda: MultiHeadAttention(6, 2, bias=False, init=Gaussian(scale=0.5)),
                         (4, 6), batch=2)
    assert [p.name.split(".")[-1] for p in net.parameters()] == ["Wq", "Wk", "Wv", "Wo"]


def test_bias_free_affine():
    net = gradient_check(lambda: Affine(4, bias=None), (3, 5), batch=2)
    assert [p.name.split(".")[-1] for p in net.parameters()] == ["W"]


def test_mean_pool_and_l2_normalize_gradients():
    gradient_check(lambda: MeanPool(), (5, 4), batch=3)
    net = gradient_check(lambda: FirstToken(), (5, 4), batch=3)
    x = np.arange(3 * 5 * 4, dtype=np.float64).reshape(3, 5, 4)
    np.testing.assert_array_equal(net.fprop(neonlite.get_backend().array(x)).get(), x[:, 0])
    net = gradient_check(lambda: L2Normalize(), (4,), batch=3)
    y = net.fprop(neonlite.get_backend().array(np.ones((3, 4)))).get()
    np.testing.assert_allclose(np.linalg.norm(y, axis=1), 1.0)


def test_segment_embedding_gradients():
    segs = np.array([[0, 1, 1, 0], [1, 1, 0, 0]], dtype=np.float64)

    def make():
        layer = SegmentEmbedding(2, 3)
        layer.segment_ids = neonlite.get_backend().array(segs)
        return layer

    gradient_check(lambda: SegmentEmbedding(2, 3), (4, 3), batch=2)  # segment 0 throughout
    net = gradient_check(make, (4, 3), batch=2)
    layer = net.layers[0]
    x = np.zeros((2, 4, 3))
    y = net.fprop(neonlite.get_backend().array(x)).get()
    np.testing.assert_array_equal(y, layer.W.value.get()[segs.astype(int)])


def _tied_lm(T=5, vocab=7, d=4, **block):
    return Model([Embedding(vocab, d, name="wte"), PositionalEmbedding(T, d),
                  TransformerBlock(d, 2, gelu="tanh", init=Gaussian(scale=0.4), **block),
                  LayerNorm(), TiedLinear("wte", name="head")])


def test_tied_embeddings_share_one_parameter_and_sum_both_gradients():
    be = neonlite.gen_backend("cpu", batch_size=2, rng_seed=0, datatype=np.float64)
    rng = np.random.default_rng(3)
    model = _tied_lm()
    model.initialize(ShapeStub((5,), "ids"))
    table = model.layers.layers[0].W
    assert sum(p is table for p in model.parameters()) == 1
    assert "head.W" not in model.get_params() and model.get_params()["wte.W"].shape == (7, 4)
    ids = be.array(rng.integers(0, 7, size=(2, 5)).astype(np.float64))
    w = rng.normal(size=(2, 5, 7))

    def loss():
        return float(np.sum(w * model.fprop(ids).get()))

    model.zero_grads()
    model.fprop(ids)
    model.bprop(be.array(w))
    analytic = table.grad.get()
    numeric = _numeric_grad(loss, table.value.get(), table.value.set, 1e-6)
    _assert_close("wte.W (tied)", analytic, numeric, 1e-5, 1e-7)
    # both uses contribute: the head's part alone is not the whole gradient
    head = model.layers.layers[-1]
    head_only = np.einsum("ntv,ntd->vd", w, head.x.get())
    assert np.abs(analytic - head_only).max() > 1e-3


def test_tied_linear_errors():
    with pytest.raises(ValueError, match="tied_to='nothing' names no Embedding"):
        Model([Embedding(5, 4, name="wte"), TiedLinear("nothing")])
    with pytest.raises(ValueError, match="tied_to must be the name"):
        TiedLinear(3)


def test_tied_model_description_and_checkpoint_round_trip(tmp_path):
    neonlite.gen_backend("cpu", batch_size=2, rng_seed=0, datatype=np.float64)
    model = _tied_lm(norm="post", bias=False, eps=1e-12)
    model.initialize(ShapeStub((5,), "ids"))
    desc = model.get_description()
    block = desc["layers"][2]["config"]
    assert block["norm"] == "post" and block["bias"] is False and block["eps"] == 1e-12
    assert desc["layers"][-1] == {"type": "TiedLinear", "config": {"tied_to": "wte",
                                                                    "name": "head"}}
    model.save(tmp_path / "m.h5")
    again = Model.load(tmp_path / "m.h5")
    assert list(again.get_params()) == list(model.get_params())
    for key, value in model.get_params().items():
        np.testing.assert_array_equal(again.get_params()[key], value)
    x = neonlite.get_backend().array(np.arange(10.0).reshape(2, 5) % 7)
    np.testing.assert_array_equal(again.fprop(x).get(), model.fprop(x).get())


def _padded_model(T, causal, pad_id=0):
    return Model([Embedding(11, 6, pad_id=pad_id, name="tok"), PositionalEmbedding(8, 6),
                  TransformerBlock(6, 2, causal=causal, norm="pre" if causal else "post",
                                   init=Gaussian(scale=0.4)),
                  TransformerBlock(6, 2, causal=causal, init=Gaussian(scale=0.4)),
                  MeanPool(), L2Normalize()])


@pytest.mark.parametrize("causal", [False, True])
def test_padding_never_influences_real_tokens(causal):
    """Each padded sequence gives, at its real positions, its unpadded run's hidden states."""
    be = neonlite.gen_backend("cpu", batch_size=3, rng_seed=0, datatype=np.float64)
    lengths = [8, 5, 2]
    rng = np.random.default_rng(4)
    seqs = [rng.integers(1, 11, size=n) for n in lengths]
    ids = np.zeros((3, 8))
    for i, s in enumerate(seqs):
        ids[i, :len(s)] = s
    model = _padded_model(8, causal)
    model.initialize(ShapeStub((8,), "ids"))
    params = model.get_params()
    pooled = model.fprop(be.array(ids), inference=True).get()
    hidden = model.layers.layers[3].outputs.get()
    assert model.layers.layers[0].key_mask.get().sum() == sum(lengths)
    for i, s in enumerate(seqs):
        neonlite.gen_backend("cpu", batch_size=1, rng_seed=0, datatype=np.float64)
        alone = _padded_model(len(s), causal)
        alone.initialize(ShapeStub((len(s),), "ids"))
        alone.set_params(params)
        out = alone.fprop(neonlite.get_backend().array(s[None].astype(np.float64)),
                          inference=True).get()
        np.testing.assert_allclose(hidden[i, :len(s)], alone.layers.layers[3].outputs.get()[0],
                                   rtol=0, atol=1e-12)
        np.testing.assert_allclose(pooled[i], out[0], rtol=0, atol=1e-12)


def test_option_errors():
    with pytest.raises(ValueError, match="norm must be 'pre' or 'post'"):
        TransformerBlock(4, 2, norm="sandwich")
    with pytest.raises(ValueError, match="pad_id must be an int in"):
        Embedding(5, 4, pad_id=5)
    with pytest.raises(ValueError, match="eps must be a number > 0"):
        LayerNorm(eps=0)
    with pytest.raises(ConfigError):
        Model.from_description([{"type": "TransformerBlock",
                                 "config": {"d_model": 4, "heads": 2, "norm": "side"}}])


def test_training_steps_with_the_new_layers_allocate_nothing_of_size():
    """After the first step, a step of a padded, segmented post-norm encoder with mean
    pooling and a tied decoder's step allocate no buffer of an activation's size (the
    (N, T, d) tensors here are 128 KiB, the limit 20 KiB)."""
    import tracemalloc
    from neonlite.layers import GeneralizedCost
    from neonlite.optimizers import AdamW
    from neonlite.transforms import CrossEntropyMulti, Softmax
    be = neonlite.gen_backend("cpu", batch_size=8, rng_seed=0)
    rng = np.random.default_rng(0)
    ids = rng.integers(1, 50, size=(8, 64)).astype(np.float32)
    ids[:, 40:] = 0
    encoder = Model([Embedding(50, 64, pad_id=0, name="tok"), PositionalEmbedding(64, 64),
                     SegmentEmbedding(2, 64), LayerNorm(1e-12),
                     TransformerBlock(64, 4, causal=False, norm="post", bias=False),
                     MeanPool(), L2Normalize(), Affine(4, activation=Softmax())])
    decoder = Model([Embedding(50, 64, name="wte"), PositionalEmbedding(64, 64),
                     TransformerBlock(64, 4, gelu="tanh"), LayerNorm(), TiedLinear("wte"),
                     Activation(Softmax())])
    cases = [(encoder, (64,), (4,), rng.integers(0, 4, size=8)),
             (decoder, (64,), (64, 50), rng.integers(0, 50, size=(8, 64)))]
    for model, in_shape, out_shape, labels in cases:
        model.initialize(ShapeStub(in_shape, "ids"), GeneralizedCost(CrossEntropyMulti()))
        x = be.array(ids)
        onehot = np.zeros(labels.shape + (out_shape[-1],), np.float32)
        np.put_along_axis(onehot, labels[..., None], 1.0, axis=-1)
        t = be.array(onehot)
        opt = AdamW(1e-3, decay_exclude=["1d", "embeddings"])
        model.train_step(x, t, opt, 0)
        tracemalloc.start()
        try:
            start = tracemalloc.get_traced_memory()[0]
            tracemalloc.reset_peak()
            for _ in range(2):
                model.train_step(x, t, opt, 0)
            peak = tracemalloc.get_traced_memory()[1] - start
        finally:
            tracemalloc.stop()
        assert peak < 20 << 10, f"{model.layers.layers[-1]}: a step allocated {peak} bytes"
