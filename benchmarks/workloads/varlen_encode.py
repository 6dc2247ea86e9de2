"""Encoding sequences of many lengths: a MiniLM-sized encoder (BERT shape: 6 post-norm
blocks, d=384, 12 heads, feed-forward 1536; random weights) over 512 real speeches of Tiny
Shakespeare (characters, cut at 256), one step = one pass over them in batches of 32.

Contenders, each counting the same real characters per pass (figure: real tokens/s):

* ``neonlite``: the model built for 256 positions, fed by ``SequenceIterator`` (batches of
  similar length, each padded to its own longest member; the iterator's host fill is timed);
* ``neonlite_padded``: the same model and batches, every batch padded to 256;
* ``torch``: ``nn.TransformerEncoder`` of the same shape (post-norm, GELU) on the same
  bucketed batches with ``src_key_padding_mask`` (its inference fast path may skip pads).

The note gives the fraction of pad positions of both neonlite contenders.  The speeches are
looked for as ``tinyshakespeare.txt`` in the working folder, then under the data root
(``$NEONLITE_DATA``).  Smoke mode: 16 passages of Python's own documentation, a 1-layer
d=32 encoder, batch 4, at most 64 characters."""
import numpy as np

from .common import torch_threads

NAME = "varlen_encode"
FIGURE = "tokens/s"
FULL = dict(n=512, bsz=32, max_len=256, d=384, heads=12, layers=6, ff=1536)
SMOKE = dict(n=16, bsz=4, max_len=64, d=32, heads=2, layers=1, ff=64)
_NOTES = {}
#: the model ``neonlite`` built, per smoke mode, which ``extra_contenders`` runs padded
_BUILT = {}


def _sizes(smoke):
    return SMOKE if smoke else FULL


def _text(smoke):
    from neonlite.data.text import builtin_text, find_text_file, read_text
    return builtin_text() if smoke else read_text(find_text_file("tinyshakespeare.txt"))


def unavailable(smoke):
    """Why the row cannot run here (None when it can)."""
    if smoke:
        return None
    from neonlite.data.iterator import DataError
    try:
        _text(smoke)
    except DataError as err:
        return f"skipped: Tiny Shakespeare not found ({err})"
    return None


def speeches(smoke):
    """``(ids, vocab size)``: the first passages' character ids, each cut to ``max_len``
    (token 0 is the pad, never a character)."""
    from neonlite.data.text import Vocabulary
    from neonlite.data.text_sequences import PAD_CHAR, passages
    s = _sizes(smoke)
    texts = ["\n".join(lines) for lines in passages(_text(smoke))[:s["n"]]]
    vocab = Vocabulary(sorted(set("".join(texts)) | {PAD_CHAR}))
    return [vocab.encode(t)[:s["max_len"]] for t in texts], len(vocab)


def _bucketed(smoke, ids):
    from neonlite.data.sequences import SequenceIterator
    s = _sizes(smoke)
    return SequenceIterator(ids, s["max_len"], labels=np.zeros(len(ids), np.int64), nclass=2,
                            shuffle=False, name="speeches")


def _model(make_backend, smoke):
    """The encoder, built for ``max_len`` positions: Embedding (pad id 0: its padding mask
    reaches attention) + learned positions + LayerNorm, then BERT-style post-norm
    transformer blocks (not causal, exact GELU, eps 1e-12)."""
    from neonlite import Model
    from neonlite.layers import Embedding, LayerNorm, PositionalEmbedding, TransformerBlock
    from neonlite.serialize import ShapeStub
    s = _sizes(smoke)
    ids, vocab = speeches(smoke)
    make_backend(s["bsz"])
    d = s["d"]
    layers = [Embedding(vocab, d, pad_id=0), PositionalEmbedding(s["max_len"], d),
              LayerNorm(1e-12)]
    layers += [TransformerBlock(d, s["heads"], mlp_ratio=s["ff"] // d, causal=False,
                                norm="post", eps=1e-12) for _ in range(s["layers"])]
    model = Model(layers, name="varlen_encoder")
    model.initialize(ShapeStub((s["max_len"],), "character ids"))
    return model, ids


def neonlite(make_backend, smoke):
    model, ids = _BUILT[smoke] = _model(make_backend, smoke)
    data = _bucketed(smoke, ids)
    _NOTES["bucketed"] = data.padding_fraction()
    same = [list(rows[:valid]) for rows, valid in data.epoch_rows()]
    assert same == [list(rows) for rows, _ in _bucketed_rows(smoke, ids)], \
        "the padded and PyTorch contenders must run the iterator's batches"

    def step():
        for x, _ in data:
            out = model.fprop(x, inference=True)
        return out
    return step, sum(len(i) for i in ids)


def extra_contenders(make_backend, smoke):
    """``neonlite_padded``: the bucketed batches, each padded to the maximum length, through
    the same model (one model's buffers, about 3 GiB at the full size, not two)."""
    s = _sizes(smoke)
    model, ids = _BUILT.get(smoke) or _model(make_backend, smoke)
    batches = [rows for rows, _ in _bucketed_rows(smoke, ids)]
    padded = np.zeros((len(ids), s["max_len"]), dtype=np.float32)
    for row, seq in enumerate(ids):
        padded[row, :len(seq)] = seq
    x = model.be.zeros((s["bsz"], s["max_len"]))
    _NOTES["padded"] = 1.0 - sum(len(i) for i in ids) / (len(batches) * s["bsz"] * s["max_len"])

    def step():
        for rows in batches:
            x.set(padded[np.resize(rows, s["bsz"])])
            out = model.fprop(x, inference=True)
        return out
    return {"neonlite_padded": step}


def torch(device, smoke):
    torch = torch_threads()
    s = _sizes(smoke)
    ids, vocab = speeches(smoke)
    torch.manual_seed(0)
    model = _torch_encoder(torch, vocab, s).eval().to(device)
    batches = []
    for rows, valid in _bucketed_rows(smoke, ids):
        longest = max(len(ids[i]) for i in rows)
        x = np.zeros((s["bsz"], longest), dtype=np.int64)
        for n, i in enumerate(np.resize(rows, s["bsz"])):
            x[n, :len(ids[i])] = ids[i]
        batches.append((torch.tensor(x, device=device), torch.tensor(x == 0, device=device)))

    def step():
        with torch.inference_mode():
            for x, pads in batches:
                out = model(x, pads)
        return out
    return step, sum(len(i) for i in ids)


def _bucketed_rows(smoke, ids):
    """The bucketed batches' rows, without a backend (the same sort SequenceIterator makes
    without shuffling: by length, stably, cut into batches)."""
    bsz = _sizes(smoke)["bsz"]
    order = np.argsort([len(i) for i in ids], kind="stable")
    return [(order[k:k + bsz], len(order[k:k + bsz])) for k in range(0, len(ids), bsz)]


def _torch_encoder(torch, vocab, s):
    nn = torch.nn

    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.tokens = nn.Embedding(vocab, s["d"], padding_idx=0)
            self.positions = nn.Embedding(s["max_len"], s["d"])
            self.norm = nn.LayerNorm(s["d"], eps=1e-12)
            layer = nn.TransformerEncoderLayer(s["d"], s["heads"], s["ff"], dropout=0.0,
                                               activation="gelu", batch_first=True,
                                               layer_norm_eps=1e-12)
            self.blocks = nn.TransformerEncoder(layer, s["layers"])

        def forward(self, x, pads):
            at = torch.arange(x.shape[1], device=x.device)
            h = self.norm(self.tokens(x) + self.positions(at)[None])
            return self.blocks(h, src_key_padding_mask=pads)
    return Encoder()


def note(row):
    """Pad fractions of the bucketed and the padded batches; bucketed / padded speed."""
    parts = []
    if "bucketed" in _NOTES:
        parts.append(f"pads: bucketed {100 * _NOTES['bucketed']:.1f}%")
    if "padded" in _NOTES:
        parts.append(f"padded to max {100 * _NOTES['padded']:.1f}%")
    if "neonlite_padded" in row:
        parts.append(f"neonlite padded {row['neonlite_padded']:.0f} tokens/s, bucketed/padded "
                     f"{row['neonlite'] / row['neonlite_padded']:.2f}x")
    return ", ".join(parts)
