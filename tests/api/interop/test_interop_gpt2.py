"""GPT-2 round trip without downloading GPT-2: a random GPT-2-shaped neonlite model (tied
embeddings, tanh GELU, biases, pre-norm) is exported; ``transformers.GPT2LMHeadModel`` loads
the directory and gives the same logits; importing the directory back gives bit-identical
parameters."""
import json

import numpy as np
import pytest

import neonlite
from neonlite.interop import build_hf_model, export_hf, import_hf

pytest.importorskip("safetensors", reason="the optional extra neonlite[hf] is not installed")

CONFIG = {"model_type": "gpt2", "vocab_size": 97, "n_positions": 24, "n_embd": 32,
          "n_layer": 2, "n_head": 4, "activation_function": "gelu_new",
          "layer_norm_epsilon": 1e-5}


def _random_gpt2(batch=3, seq_len=16):
    neonlite.gen_backend("cpu", batch_size=batch, rng_seed=5, datatype=np.float32)
    model = build_hf_model(CONFIG, head="lm", seq_len=seq_len)
    rng = np.random.default_rng(7)
    # non-trivial biases and layer-norm parameters, so a misplaced one shows
    model.set_params({k: v + rng.normal(0, 0.05, v.shape).astype(v.dtype)
                      if "chars" not in k else v for k, v in model.get_params().items()})
    return model


def test_gpt2_export_import_is_bit_identical(tmp_path):
    model = _random_gpt2()
    export_hf(model, tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["architectures"] == ["GPT2LMHeadModel"]
    assert config["activation_function"] == "gelu_new" and config["tie_word_embeddings"]
    again = import_hf(tmp_path, head="lm", seq_len=16)
    original = model.get_params()
    assert list(again.get_params()) == list(original)
    for key, value in again.get_params().items():
        np.testing.assert_array_equal(value, original[key], err_msg=key)
    assert [p.name for p in again.parameters()].count("wte.W") == 1


def test_gpt2_logits_equal_transformers(tmp_path):
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    transformers = pytest.importorskip("transformers", reason="transformers is not installed")
    model = _random_gpt2()
    export_hf(model, tmp_path)
    ref = transformers.GPT2LMHeadModel.from_pretrained(tmp_path).eval()
    assert ref.lm_head.weight.data_ptr() == ref.transformer.wte.weight.data_ptr()
    ids = np.random.default_rng(2).integers(0, 97, size=(3, 16))
    logits = model.fprop(neonlite.get_backend().array(ids.astype(np.float32)),
                         inference=True).get()
    with torch.no_grad():
        expected = ref(torch.tensor(ids)).logits.numpy()
    worst = np.abs(logits - expected).max()
    assert worst <= 1e-5, f"GPT-2 logits differ from transformers' by {worst}"


def test_gpt2_generate_with_kv_cache_matches_full_run():
    model = _random_gpt2(batch=1)
    ids = np.random.default_rng(3).integers(0, 97, size=(1, 16)).astype(np.float32)
    be = neonlite.get_backend()
    full = model.fprop(be.array(ids), inference=True).get()[0]
    state = model.layers.init_decode(1, 16)
    x = be.zeros((1, 1))
    for t in range(16):
        x.set(ids[:, t:t + 1])
        step = model.layers.decode(x, state).get()[0, 0]
        np.testing.assert_allclose(step, full[t], rtol=0, atol=2e-5)
