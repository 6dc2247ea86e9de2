"""Recurrent layers and sequence reductions after an Embedding with a ``pad_id``, exported to
ONNX: the padding mask becomes the recurrent ops' ``sequence_lens`` and the reductions'
weights, and ONNX Runtime gives neonlite's ``predict`` on batches padded at the end (as
``Tokenizer.encode_batch`` pads them), at two lengths on one file and two batch sizes; a mask
set by hand is refused by name."""
import numpy as np
import pytest

import neonlite.layers as L
from neonlite import Model
from neonlite.data import ArrayIterator
from neonlite.interop.onnx import OnnxExportError
from support.harness import make_backend
from support.onnx_parity import export_and_compare, export_and_compare_lengths, randomize
from support.requires import requires

pytestmark = requires("onnx", "onnxruntime")

VOCAB, D = 13, 6
LENGTHS = (9, 5)
BATCHES = (3, 6)
TOLERANCE = 1e-5

CASES = {
    "LSTM sequence": lambda: [L.LSTM(5)],
    "LSTM reversed, final state": lambda: [L.LSTM(5, reverse=True, return_sequences=False)],
    "GRU then RecurrentLast": lambda: [L.GRU(5), L.RecurrentLast()],
    "Recurrent then RecurrentMean": lambda: [L.Recurrent(4), L.RecurrentMean()],
    "Recurrent then RecurrentSum": lambda: [L.Recurrent(4), L.RecurrentSum()],
    "BiLSTM sequence": lambda: [L.BiLSTM(3)],
    "BiGRU final states": lambda: [L.BiGRU(3, return_sequences=False)],
    "DeepBiLSTM then RecurrentMean": lambda: [L.DeepBiLSTM(3, depth=2), L.RecurrentMean()],
    "RecurrentLast on embeddings": lambda: [L.RecurrentLast()],
}


def model_at(make_layers, T):
    make_backend("cpu", batch_size=4)
    model = Model([L.Embedding(VOCAB, D, pad_id=0)] + make_layers())
    model.initialize(ArrayIterator(np.zeros((4, T), np.float32), shuffle=False))
    randomize(model, seed=3)
    return model


def padded_at_the_end(T, seed=5):
    """Batches of ids padded at the end: one row full, one of a single token, the rest of
    random lengths."""
    rng = np.random.default_rng(seed + T)
    out = []
    for n in BATCHES:
        ids = rng.integers(1, VOCAB, (n, T))
        lengths = rng.integers(1, T + 1, n)
        lengths[0], lengths[1] = T, 1
        for row, length in enumerate(lengths):
            ids[row, length:] = 0
        out.append(ids.astype(np.float32))
    return out


@pytest.mark.parametrize("case", sorted(CASES))
def test_padded_sequences_match_onnx_runtime(case, tmp_path):
    difference = export_and_compare_lengths(lambda T: model_at(CASES[case], T),
                                            padded_at_the_end, tmp_path / "padded.onnx",
                                            LENGTHS)
    assert difference <= TOLERANCE, f"{case}: max relative difference {difference:.3g}"


def test_a_mask_set_by_hand_is_refused(tmp_path):
    make_backend("cpu", batch_size=4)
    model = Model([L.Linear(D), L.LSTM(5)])
    model.initialize(ArrayIterator(np.zeros((4, 7, 3), np.float32), shuffle=False))
    lstm = model.layers.leaves()[-1]
    lstm.mask = np.ones((4, 7), np.float32)
    with pytest.raises(OnnxExportError, match=r"LSTM.*mask set by hand"):
        model.export_onnx(tmp_path / "m.onnx")
    assert not (tmp_path / "m.onnx").exists()


def test_block_sparse_attention_hides_pads_in_onnx_too(tmp_path):
    """BlockSparseAttention after an Embedding with a pad_id (its layout fixes T = 16)."""
    model = model_at(lambda: [L.BlockSparseAttention(2, {"local": {"window": 1}},
                                                     block_size=8, causal=False)], 16)
    difference = export_and_compare(model, tmp_path / "bsa.onnx", padded_at_the_end(16))
    assert difference <= TOLERANCE, f"max relative difference {difference:.3g}"
