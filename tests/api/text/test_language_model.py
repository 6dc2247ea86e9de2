"""Character language modelling: TextCorpus windows, generation with and without the key/value
cache, and the bad-input errors of the transformer layers (the language-model metrics are
``tests/api/costs/test_lm_metrics.py``'s)."""
import numpy as np
import pytest
from support.harness import build
from support.tiny_lm import TEXT, trained_tiny_lm, write_text_file

import neonlite
from neonlite.data import DataError, TextCorpus, Vocabulary
from neonlite.generation import generate
from neonlite.layers import Embedding, MultiHeadAttention, PositionalEmbedding, ShapeError


@pytest.fixture
def text_file(tmp_path):
    return write_text_file(tmp_path)


# ---- data -------------------------------------------------------------------------------------
def test_text_corpus_windows_and_targets(text_file):
    neonlite.gen_backend("cpu", batch_size=4, rng_seed=0)
    corpus = TextCorpus(text_file, seq_len=8, split=0.75, nbatches=3)
    ids = corpus.vocab.encode(TEXT)
    assert corpus.vocab.chars == "".join(sorted(set(TEXT)))
    assert corpus.shape == (8,) and corpus.target_shape == (8,)
    assert len(corpus) == corpus.nbatches == 3
    batches = [(x.get(), t.get()) for x, t in corpus]
    assert len(batches) == 3
    cut = int(len(TEXT) * 0.75)
    for x, t in batches:
        assert t.dtype == np.int32 and t.shape == (4, 8)
        labels = t
        for row, nxt in zip(x.astype(int), labels):  # each window is text followed by its next char
            start = next(s for s in range(cut - 8) if (ids[s:s + 8] == row).all()
                         and ids[s + 8] == nxt[-1])
            assert (ids[start + 1:start + 9] == nxt).all()
    assert not all(np.array_equal(batches[0][0], b[0]) for b in batches[1:])


def test_text_corpus_validation_walks_the_last_part_in_order(text_file):
    neonlite.gen_backend("cpu", batch_size=4, rng_seed=0)
    corpus = TextCorpus(text_file, seq_len=8, split=0.75)
    valid = corpus.valid_iter
    tail = corpus.vocab.encode(TEXT)[int(len(TEXT) * 0.75):]
    assert valid.ndata == (len(tail) - 1) // 8
    rows, seen = [], 0
    for x, _ in valid:
        rows.extend(x.get()[:valid.valid].astype(int))
        seen += valid.valid
    assert seen == valid.ndata
    np.testing.assert_array_equal(np.concatenate(rows), tail[:valid.ndata * 8])


def test_text_corpus_random_windows_follow_the_backend_seed(text_file):
    def first_batch(seed):
        neonlite.gen_backend("cpu", batch_size=4, rng_seed=seed)
        return next(iter(TextCorpus(text_file, seq_len=8)))[0].get()

    np.testing.assert_array_equal(first_batch(3), first_batch(3))
    assert not np.array_equal(first_batch(3), first_batch(4))


def test_text_corpus_defaults_to_python_documentation():
    neonlite.gen_backend("cpu", batch_size=2, rng_seed=0)
    corpus = TextCorpus(seq_len=32)
    assert len(corpus.vocab) > 50 and corpus.ndata > 100 and corpus.valid_iter.ndata > 10


def test_text_corpus_errors(tmp_path, text_file):
    neonlite.gen_backend("cpu", batch_size=2, rng_seed=0)
    with pytest.raises(DataError, match=r"character 'q' at offset 4 is not in the vocabulary"):
        TextCorpus(text_file, seq_len=8, vocab="the ")
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"abc\xff")
    with pytest.raises(DataError, match=r"not UTF-8 text: byte offset 3"):
        TextCorpus(str(bad), seq_len=2)
    with pytest.raises(DataError, match="too few"):
        TextCorpus(text_file, seq_len=5000)
    with pytest.raises(DataError, match="split"):
        TextCorpus(text_file, split=1.0)
    with pytest.raises(DataError, match="not found"):
        TextCorpus(str(tmp_path), filename="missing.txt")


# ---- generation -------------------------------------------------------------------------------
def test_generate_with_cache_matches_full_recompute(text_file):
    """40 characters from a prompt of 5 pass the 16-position window twice, so the cache's
    restart is exercised as well as one-position steps."""
    model, corpus = trained_tiny_lm(text_file)
    kw = dict(prompt="the q", n=40, temperature=0.9, top_k=10, seed=7)
    cached = generate(model, corpus, use_cache=True, **kw)
    full = generate(model, corpus, use_cache=False, **kw)
    assert len(cached) == 40 and set(cached) <= set(corpus.vocab.chars)
    assert cached == full
    assert generate(model, None, use_cache=True, **kw) == cached  # vocabulary from the model
    assert generate(model, corpus, use_cache=True, **dict(kw, seed=8)) != cached


def test_full_recompute_runs_at_the_contexts_own_length(text_file):
    """Without the cache, a model of sequences of any length up to its window runs each
    context at its own length (not padded to the window), with the same text."""
    model, corpus = trained_tiny_lm(text_file)
    kw = dict(prompt="the q", n=14, temperature=0.9, top_k=10, seed=7)
    widths, fprop = [], model.fprop
    model.fprop = lambda x, inference=False: (widths.append(x.shape[1]), fprop(x, inference))[1]
    full = generate(model, corpus, use_cache=False, **kw)
    assert widths[:3] == [5, 6, 7] and max(widths) == 16
    del model.fprop
    assert full == generate(model, corpus, use_cache=True, **kw)


def test_generate_from_a_checkpoint_with_the_command(text_file, tmp_path, capsys):
    from neonlite.cli import main
    model, corpus = trained_tiny_lm(text_file, dtype=np.float32, steps=5)
    want = model.generate("the q", 25, temperature=0.9, top_k=5, seed=3)
    model.save(str(tmp_path / "lm.h5"))
    assert main(["generate", str(tmp_path / "lm.h5"), "--prompt", "the q", "-n", "25",
                 "-t", "0.9", "-k", "5", "-r", "3"]) == 0
    assert capsys.readouterr().out == "the q" + want + "\n"


def test_generate_rejects_unknown_prompt_characters(text_file):
    model, corpus = trained_tiny_lm(text_file, steps=1)
    with pytest.raises(ValueError, match=r"character 'Z' at offset 4 is not in the vocabulary"):
        generate(model, corpus, prompt="the Z", n=3)
    with pytest.raises(ValueError, match="temperature"):
        generate(model, corpus, prompt="the", n=3, temperature=-1)


def test_greedy_like_sampling_learns_the_repeated_text(text_file):
    model, corpus = trained_tiny_lm(text_file, dtype=np.float32, steps=150)
    out = generate(model, corpus, prompt="the quick ", n=20, temperature=0.05, seed=0)
    assert out.startswith("brown fox"), out


# ---- bad input --------------------------------------------------------------------------------
def test_token_id_out_of_range_is_a_clear_error():
    be = neonlite.gen_backend("cpu", batch_size=2, rng_seed=0)
    net = build(Embedding(5, 3, name="embed"), (4,))
    ids = np.zeros((2, 4))
    ids[1, 2] = 5
    with pytest.raises(ValueError, match=r"layer 'embed' \(Embedding\): token id 5 at position "
                                         r"\(1, 2\).*\[0, 5\)"):
        net.fprop(be.array(ids))


def test_sequence_longer_than_max_len_is_a_clear_error():
    neonlite.gen_backend("cpu", batch_size=2, rng_seed=0)
    with pytest.raises(ShapeError, match=r"'pos' \(PositionalEmbedding\) expects sequences of "
                                         r"at most max_len=8"):
        build(PositionalEmbedding(8, 4, name="pos"), (9, 4))


def test_attention_input_errors():
    be = neonlite.gen_backend("cpu", batch_size=2, rng_seed=0)
    net = build(MultiHeadAttention(4, 2, context_shape=(3, 5), name="xattn"), (2, 4))
    x = be.zeros((2, 2, 4))
    with pytest.raises(ValueError,
                       match=r"'xattn'.*needs a context of shape \(2, 3, 5\), got none"):
        net.layers[0].fprop(x)
    with pytest.raises(ValueError, match=r"key_mask must have shape \(2, 3\)"):
        net.layers[0].fprop(x, context=be.zeros((2, 3, 5)), key_mask=be.ones((2, 2)))
    with pytest.raises(ValueError, match="not a multiple of heads=3"):
        MultiHeadAttention(8, 3)
    with pytest.raises(ShapeError, match=r"expects a sequence \(T, 4\)"):
        build(MultiHeadAttention(4, 2), (3, 6))


def test_embedding_vocabulary_round_trips_through_params():
    neonlite.gen_backend("cpu", batch_size=2, rng_seed=0)
    net = build(Embedding(3, 2, name="embed"), (4,))
    layer = net.layers[0]
    assert layer.vocabulary() is None
    layer.set_vocabulary("ab\n")
    assert layer.vocabulary() == "ab\n"
    assert Vocabulary(layer.vocabulary()).encode("ba").tolist() == [1, 0]
    with pytest.raises(ValueError, match="must be 3 single characters"):
        layer.set_vocabulary("abcd")
