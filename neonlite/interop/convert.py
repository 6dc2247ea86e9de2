"""``import_hf`` and ``export_hf``: Hugging Face model directories <-> neonlite models."""
import json
import os
from pathlib import Path

import numpy as np

from ..atomic import atomic_write
from ..backends import gen_backend, get_backend
from ..folder_swap import replace_folder
from ..model import Model
from ..output_paths import check_output_folder
from ..serialize import ShapeStub
from . import bert, gpt2
from .errors import InteropError
from .hf_config import CONFIG, read_config
from .mapping import export_links, load_links, strip_prefix
from .tensors import WEIGHTS, read_tensors, write_tensors

FAMILIES = {"bert": bert, "gpt2": gpt2}


def _family(model_type, where):
    if not isinstance(model_type, str) or model_type not in FAMILIES:
        raise InteropError(f"{where}: model_type {model_type!r} is not supported; neonlite "
                           f"imports and exports {', '.join(repr(f) for f in FAMILIES)}")
    return FAMILIES[model_type]


def _check_head(family, model_type, head):
    if head not in family.HEADS:
        raise InteropError(f"head {head!r} is not supported for model_type {model_type!r}; "
                           f"supported: {', '.join(repr(h) for h in family.HEADS)}")


def build_hf_model(config, head="none", seq_len=None, dropout=0.0, where="config"):
    """A new neonlite model (random weights, initialized on the current backend for sequences
    of ``seq_len`` tokens, default the config's maximum) of the architecture a Hugging Face
    ``config`` (dict) describes, with ``head`` ("none": the last hidden state (N, T, d);
    "lm": next-token logits (N, T, vocab), GPT-2; "sentence-embedding": mean pooling over
    the real tokens and L2 normalisation (N, d), BERT)."""
    model_type = config.get("model_type")
    family = _family(model_type, where)
    _check_head(family, model_type, head)
    model = Model(family.build_layers(config, head, where, dropout), name=model_type)
    max_len = model.layers.layers[1].max_len
    seq_len = max_len if seq_len is None else seq_len
    if not isinstance(seq_len, int) or not 1 <= seq_len <= max_len:
        raise InteropError(f"{where}: seq_len must be an int in [1, {max_len}] (the model's "
                           f"positions), got {seq_len!r}")
    _backend()
    model.initialize(ShapeStub((seq_len,), f"{model_type} token ids"))
    return model


def _backend():
    try:
        return get_backend()
    except RuntimeError:
        return gen_backend("cpu", batch_size=1)


def import_hf(path, head="none", seq_len=None, dropout=0.0):
    """The neonlite model stored in Hugging Face model directory ``path`` (``config.json`` +
    ``model.safetensors``, or shards with ``model.safetensors.index.json``), for
    ``model_type`` bert or gpt2, on the current backend (a CPU backend with batch size 1 when
    there is none) in its dtype: bf16/f16/f32 tensors are converted to it.  See
    :func:`build_hf_model` for ``head`` and ``seq_len``.  Every tensor is checked by name and
    shape; anything wrong is an :class:`InteropError` in one line."""
    path = Path(path)
    config = read_config(path)
    model = build_hf_model(config, head, seq_len, dropout, where=str(path / CONFIG))
    family = FAMILIES[config["model_type"]]
    tensors = read_tensors(path, np.dtype(model.be.dtype))
    tensors = strip_prefix(tensors, family.PREFIXES)
    if family is bert:
        tensors = bert.tied_tensors(tensors, str(path))
    if family is gpt2 and "lm_head.weight" in tensors:
        head_w = tensors.pop("lm_head.weight")
        if "wte.weight" in tensors and not np.array_equal(head_w, tensors["wte.weight"]):
            raise InteropError(f"{path}: tensor 'lm_head.weight' differs from 'wte.weight'; "
                               f"neonlite supports GPT-2 with tied embeddings only")
    load_links(model, family.links(model), tensors, str(path), family.ignored)
    return model


def _which_family(model, where):
    top = model.layers.layers
    for name, family in FAMILIES.items():
        if family.matches(top):
            return name, family
    kinds = ", ".join(type(layer).__name__ for layer in top)
    raise InteropError(f"{where}: the model ({kinds}) has neither the BERT form (Embedding, "
                       f"PositionalEmbedding, SegmentEmbedding, LayerNorm, post-norm "
                       f"TransformerBlocks[, MeanPool, L2Normalize]) nor the GPT-2 form "
                       f"(Embedding, PositionalEmbedding, pre-norm TransformerBlocks, "
                       f"LayerNorm[, TiedLinear])")


def export_hf(model, out_dir):
    """Write ``model`` (initialized; BERT or GPT-2 form, as :func:`import_hf` builds them) to
    directory ``out_dir`` as ``config.json`` + ``model.safetensors`` in Hugging Face's
    naming, float32, so ``transformers`` loads it (``BertModel`` / ``GPT2Model`` /
    ``GPT2LMHeadModel``).  ``out_dir`` must be absent or an earlier export (a folder holding
    nothing but those two files: :func:`is_export_folder`); the export is written whole into
    a sibling folder and swapped into place (:func:`neonlite.folder_swap.replace_folder`), so
    a crash leaves the old export or the new one, never a mix.  Returns the directory's
    path."""
    if model.in_shape is None:
        raise InteropError("export_hf: the model has no parameters yet; initialize or load it "
                           "first")
    check_output_folder(out_dir, "export_hf out_dir", is_export_folder)
    out_dir = Path(out_dir)
    model_type, family = _which_family(model, str(out_dir))
    config = family.config_for(model, str(out_dir))
    tensors = {k: v.astype(np.float32) for k, v in export_links(model, family.links(model))
               .items()}
    if config["architectures"] in (["GPT2LMHeadModel"], ["BertForMaskedLM"]):
        prefix = "transformer." if model_type == "gpt2" else "bert."
        tensors = {k if k.startswith("cls.") else prefix + k: v for k, v in tensors.items()}
    with replace_folder(out_dir) as staging:
        write_tensors(staging / WEIGHTS, tensors, metadata={"format": "pt"})
        with atomic_write(staging / CONFIG) as f:
            f.write((json.dumps(config, indent=2) + "\n").encode())
    return out_dir


def is_export_folder(folder):
    """True when ``folder`` holds nothing but regular files named ``config.json`` and
    ``model.safetensors`` (what :func:`export_hf` writes; empty counts too): a folder an
    export may replace whole."""
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return False
    return all(e.name in (CONFIG, WEIGHTS) and e.is_file(follow_symlinks=False)
               for e in entries)
