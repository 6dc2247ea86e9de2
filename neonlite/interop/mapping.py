"""Tensor-by-tensor correspondence between a neonlite model and a Hugging Face checkpoint.

A :class:`Link` ties one Hugging Face tensor to one or more neonlite tensors: transposed when
the layouts differ (PyTorch ``Linear`` weights are (out, in), neonlite's (in, out)), and split
along the last axis of the neonlite layout when Hugging Face fuses them (GPT-2's ``c_attn``
holds [Wq | Wk | Wv]).
"""
import numpy as np

from .errors import InteropError


class Link:
    """Hugging Face tensor ``hf`` <-> the neonlite tensors ``parts`` (names, side by side
    along the last axis of neonlite's layout); ``transpose`` for 2-D weights stored (out, in)."""

    def __init__(self, hf, parts, transpose=False):
        self.hf, self.transpose = hf, transpose
        self.parts = [parts] if isinstance(parts, str) else list(parts)

    def hf_shape(self, shapes):
        """The Hugging Face shape implied by the neonlite shapes ``{name: shape}``."""
        first = shapes[self.parts[0]]
        shape = tuple(first[:-1]) + (sum(shapes[p][-1] for p in self.parts),)
        return shape[::-1] if self.transpose else shape

    def to_neonlite(self, array, shapes):
        """``{neonlite name: array}`` from the Hugging Face tensor."""
        value = array.T if self.transpose else array
        out, col = {}, 0
        for name in self.parts:
            width = shapes[name][-1]
            out[name] = np.ascontiguousarray(value[..., col:col + width])
            col += width
        return out

    def to_hf(self, params):
        """The Hugging Face tensor from the neonlite ``{name: array}``."""
        value = np.concatenate([params[p] for p in self.parts], axis=-1) \
            if len(self.parts) > 1 else params[self.parts[0]]
        return np.ascontiguousarray(value.T if self.transpose else value)


def strip_prefix(tensors, prefixes):
    """The tensors with a model-class prefix (``bert.``, ``transformer.``) removed when one
    of ``prefixes`` starts some names (heads like ``cls.`` or ``lm_head.`` keep theirs)."""
    for prefix in prefixes:
        if any(k.startswith(prefix) for k in tensors):
            return {(k[len(prefix):] if k.startswith(prefix) else k): v
                    for k, v in tensors.items()}
    return tensors


def load_links(model, links, tensors, where, ignored=lambda name: False):
    """Set the model's parameters from Hugging Face ``tensors`` through ``links``: every
    linked tensor must be there with its shape and every other tensor must be ``ignored``
    (a test of its name); an :class:`InteropError` naming the first tensor that is not so."""
    named = model.get_params()
    shapes = {k: v.shape for k, v in named.items()}
    params = {}
    for link in links:
        if link.hf not in tensors:
            raise InteropError(f"{where}: tensor '{link.hf}' is missing (expected shape "
                               f"{link.hf_shape(shapes)})")
        array = tensors[link.hf]
        if tuple(array.shape) != link.hf_shape(shapes):
            raise InteropError(f"{where}: tensor '{link.hf}' has shape {tuple(array.shape)}, "
                               f"expected {link.hf_shape(shapes)}")
        params.update(link.to_neonlite(array, shapes))
    known = {link.hf for link in links}
    for name in tensors:
        if name not in known and not ignored(name):
            raise InteropError(f"{where}: unexpected tensor '{name}' (not part of the model "
                               f"neonlite builds from this config)")
    for name, value in named.items():
        params.setdefault(name, value)  # buffers with no Hugging Face tensor keep theirs
    model.set_params(params)


def export_links(model, links):
    """``{Hugging Face name: array}`` of the model's parameters through ``links``."""
    params = model.get_params()
    return {link.hf: link.to_hf(params) for link in links}
