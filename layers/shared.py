"""Links between layers a model makes once: tied embeddings and padding masks.

Layers are graph-free, each seeing only its input; two things cross that line and are wired
here by the :class:`~neonlite.Model`: a :class:`~neonlite.layers.TiedLinear` reads the table
of the Embedding it names (:func:`tie_layers`, when the model is built), and the padding mask
an Embedding with a ``pad_id`` writes on each fprop is read by the self-attention layers and
mean poolings after it (:func:`share_padding_masks`, once the layers are allocated).
"""
from .attention import MultiHeadAttention
from .embedding import Embedding
from .recurrent import RecurrentBase


def tie_layers(leaves):
    """Link every leaf with a ``tied_to`` name to the Embedding of that name that comes
    before it; a :class:`~neonlite.config.ConfigError` naming both when there is none."""
    from ..config.errors import ConfigError
    embeddings = {}
    for leaf in leaves:
        if isinstance(leaf, Embedding):
            embeddings[leaf.name] = leaf
        tied_to = getattr(leaf, "tied_to", None)
        if tied_to is None:
            continue
        if tied_to not in embeddings:
            known = ", ".join(repr(name) for name in embeddings) or "none"
            raise ConfigError(f"layer '{leaf.name}' ({type(leaf).__name__}): tied_to="
                             f"'{tied_to}' names no Embedding before it (Embeddings before "
                             f"it: {known})")
        leaf.embedding = embeddings[tied_to]


def share_padding_masks(leaves):
    """Give each self-attention layer, each recurrent layer and each layer with a
    ``uses_key_mask`` flag (mean pooling) the ``key_mask`` (N, T) of the last Embedding with a
    ``pad_id`` before it, when that mask covers the layer's sequence length (recorded as the
    layer's ``shared_mask`` too: for a batch of T' steps the layer reads it as the view of
    that length the Embedding writes, :meth:`~neonlite.layers.layer.Layer.mask_view`).
    A recurrent layer takes it as its ``mask`` (pads neither change its state nor take
    gradient)."""
    mask = None
    for leaf in leaves:
        if isinstance(leaf, Embedding) and leaf.key_mask is not None:
            mask = leaf.key_mask
            continue
        if mask is None:
            continue
        self_attention = isinstance(leaf, MultiHeadAttention) and not leaf.cross
        if leaf.in_shape is None or not leaf.in_shape or leaf.in_shape[0] != mask.shape[1]:
            continue
        if self_attention or getattr(leaf, "uses_key_mask", False):
            leaf.key_mask = leaf.shared_mask = mask
        elif isinstance(leaf, RecurrentBase) and leaf.mask is None:
            leaf.mask = leaf.shared_mask = mask
