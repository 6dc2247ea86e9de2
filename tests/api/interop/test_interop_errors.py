"""Bad Hugging Face input gives one clear error: an unsupported model_type or option (naming
it and what is supported), a missing, wrong-shaped or unexpected tensor (naming it), a
truncated or corrupt safetensors file, pickle weights; sharded checkpoints and bf16/f16
tensors load."""
import json
import sys

import numpy as np
import pytest

import neonlite
from neonlite.cli import main
from neonlite.interop import InteropError, build_hf_model, export_hf, import_hf

pytest.importorskip("safetensors", reason="the optional extra neonlite[hf] is not installed")
from safetensors.numpy import load_file, save_file  # noqa: E402

BERT = {"model_type": "bert", "vocab_size": 50, "hidden_size": 16, "num_hidden_layers": 1,
        "num_attention_heads": 2, "intermediate_size": 32, "max_position_embeddings": 12,
        "type_vocab_size": 2, "layer_norm_eps": 1e-12, "pad_token_id": 0}


@pytest.fixture
def bert_dir(tmp_path):
    neonlite.gen_backend("cpu", batch_size=2, rng_seed=0, datatype=np.float32)
    model = build_hf_model(BERT, seq_len=8)
    export_hf(model, tmp_path / "bert")
    return tmp_path / "bert", model


def _rewrite(path, change):
    tensors = load_file(path / "model.safetensors")
    change(tensors)
    save_file(tensors, path / "model.safetensors")


def _edit_config(path, **entries):
    config = json.loads((path / "config.json").read_text())
    config.update(entries)
    (path / "config.json").write_text(json.dumps(config))


def test_unsupported_model_type_lists_the_supported(bert_dir):
    path, _ = bert_dir
    _edit_config(path, model_type="llama")
    with pytest.raises(InteropError, match="model_type 'llama' is not supported; neonlite "
                                           "imports and exports 'bert', 'gpt2'"):
        import_hf(path)


def test_unsupported_option_names_it(bert_dir):
    path, _ = bert_dir
    _edit_config(path, hidden_act="relu")
    with pytest.raises(InteropError, match="hidden_act='relu' is not supported; neonlite "
                                           "supports 'gelu', 'gelu_new'"):
        import_hf(path)
    _edit_config(path, hidden_act="gelu", position_embedding_type="relative_key")
    with pytest.raises(InteropError, match="position_embedding_type='relative_key'"):
        import_hf(path)


def test_unsupported_head(bert_dir):
    with pytest.raises(InteropError, match="head 'classifier' is not supported for model_type "
                                           "'bert'; supported: 'none', 'sentence-embedding', "
                                           "'lm'"):
        import_hf(bert_dir[0], head="classifier")
    with pytest.raises(InteropError, match="tensor 'cls.predictions.transform.dense.weight' "
                                           "is missing"):
        import_hf(bert_dir[0], head="lm")


def test_missing_tensor_is_named(bert_dir):
    path, _ = bert_dir
    _rewrite(path, lambda t: t.pop("encoder.layer.0.attention.self.key.bias"))
    with pytest.raises(InteropError, match=r"tensor 'encoder.layer.0.attention.self.key.bias' "
                                           r"is missing \(expected shape \(16,\)\)"):
        import_hf(path)


def test_wrong_shape_is_named(bert_dir):
    path, _ = bert_dir
    _rewrite(path, lambda t: t.update({"encoder.layer.0.intermediate.dense.weight":
                                       np.zeros((16, 32), np.float32)}))
    with pytest.raises(InteropError, match=r"'encoder.layer.0.intermediate.dense.weight' has "
                                           r"shape \(16, 32\), expected \(32, 16\)"):
        import_hf(path)


def test_unexpected_tensor_is_named(bert_dir):
    path, _ = bert_dir
    _rewrite(path, lambda t: t.update({"encoder.layer.7.mystery": np.zeros(3, np.float32)}))
    with pytest.raises(InteropError, match="unexpected tensor 'encoder.layer.7.mystery'"):
        import_hf(path)


@pytest.mark.parametrize("damage", ["truncate", "garbage"])
def test_truncated_or_corrupt_file_is_one_line(bert_dir, damage, capsys, tmp_path):
    path, _ = bert_dir
    weights = path / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[:len(data) // 2] if damage == "truncate" else b"\x07" * 64)
    with pytest.raises(InteropError, match="not a readable safetensors file"):
        import_hf(path)
    assert main(["import", str(path), "-o", str(tmp_path / "x.h5")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "truncated or corrupt" in err
    assert not (tmp_path / "x.h5").exists()


def test_pickle_weights_are_refused(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(BERT))
    (tmp_path / "pytorch_model.bin").write_bytes(b"not loaded")
    with pytest.raises(InteropError, match="pytorch_model.bin is a pickle file, which neonlite "
                                           "never loads"):
        import_hf(tmp_path)


def test_sharded_checkpoint_and_half_precision_tensors(bert_dir):
    torch = pytest.importorskip("torch", reason="PyTorch writes the bf16 file")
    from safetensors.torch import save_file as save_torch
    path, model = bert_dir
    tensors = load_file(path / "model.safetensors")
    names = sorted(tensors)
    half = names[:len(names) // 2]
    save_torch({k: torch.tensor(tensors[k]).to(torch.bfloat16) for k in half},
               str(path / "model-00001-of-00002.safetensors"))
    save_file({k: tensors[k].astype(np.float16) for k in names[len(names) // 2:]},
              path / "model-00002-of-00002.safetensors")
    (path / "model.safetensors").unlink()
    weight_map = {k: "model-00001-of-00002.safetensors" if k in half else
                  "model-00002-of-00002.safetensors" for k in names}
    (path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    loaded = import_hf(path, seq_len=8)
    for name, value in loaded.get_params().items():
        original = model.get_params()[name]
        if name.endswith(".chars"):  # the text-vocabulary buffer, not a Hugging Face tensor
            continue
        assert value.dtype == np.float32
        np.testing.assert_allclose(value, original, rtol=1e-2, atol=1e-3, err_msg=name)
    emb = loaded.get_params()["word_embeddings.W"]
    source = tensors["embeddings.word_embeddings.weight"]
    expected = (torch.tensor(source).to(torch.bfloat16).float().numpy()
                if "embeddings.word_embeddings.weight" in half else
                source.astype(np.float16).astype(np.float32))
    np.testing.assert_array_equal(emb, expected)


def test_export_refuses_a_model_of_neither_form(tmp_path):
    from neonlite import Model
    from neonlite.layers import Affine
    from neonlite.serialize import ShapeStub
    neonlite.gen_backend("cpu", batch_size=2, rng_seed=0)
    model = Model([Affine(3)])
    model.initialize(ShapeStub((4,)))
    with pytest.raises(InteropError, match="neither the BERT form"):
        export_hf(model, tmp_path / "out")


def test_library_imports_without_the_hf_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "safetensors", None)
    from neonlite.interop.errors import require
    with pytest.raises(InteropError, match=r"pip install neonlite\[hf\]"):
        require("safetensors")


def test_bert_masked_lm_round_trip_equals_transformers(tmp_path):
    """A random BERT with its masked-LM head (tied decoder): export, BertForMaskedLM gives the
    same logits, import gives identical parameters."""
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    transformers = pytest.importorskip("transformers", reason="transformers is not installed")
    neonlite.gen_backend("cpu", batch_size=2, rng_seed=0, datatype=np.float32)
    model = build_hf_model(BERT, head="lm", seq_len=8)
    rng = np.random.default_rng(1)
    model.set_params({k: v + rng.normal(0, 0.05, v.shape).astype(v.dtype)
                      if v.dtype.kind == "f" else v for k, v in model.get_params().items()})
    export_hf(model, tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["architectures"] == \
        ["BertForMaskedLM"]
    again = import_hf(tmp_path, head="lm", seq_len=8)
    for key, value in model.get_params().items():
        np.testing.assert_array_equal(again.get_params()[key], value, err_msg=key)
    ref = transformers.BertForMaskedLM.from_pretrained(tmp_path).eval()
    ids = np.array([[2, 5, 9, 11, 3, 0, 0, 0], [4, 4, 8, 1, 7, 6, 9, 3]])
    with torch.no_grad():
        expected = ref(input_ids=torch.tensor(ids),
                       attention_mask=torch.tensor((ids != 0).astype(np.int64))).logits.numpy()
    got = model.fprop(neonlite.get_backend().array(ids.astype(np.float32)), inference=True).get()
    assert np.abs(got[0, :5] - expected[0, :5]).max() <= 1e-5
    assert np.abs(got[1] - expected[1]).max() <= 1e-5
