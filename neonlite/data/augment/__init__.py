"""Augmentation of uint8 image batches: ops, the pipeline that applies them, and the YAML form.

Every random choice of a sample comes from Philox keyed on (epoch key, sample index, op), so a
sample's augmentation is the same whatever batch, worker or thread augments it (see
:mod:`.draws`).  Each op's numpy ``reference`` is its definition.
"""
from .colour import ColorJitter, Normalize
from .draws import epoch_key, sample_uniforms
from .from_config import OPS, pipeline_from_config
from .geometry import CenterCrop, Flip, PadCrop, RandomResizedCrop, Resize
from .op import AugmentOp
from .pipeline import Pipeline

__all__ = ["AugmentOp", "PadCrop", "Flip", "RandomResizedCrop", "Resize", "CenterCrop",
           "ColorJitter", "Normalize", "Pipeline", "epoch_key", "sample_uniforms",
           "pipeline_from_config", "OPS"]
