"""``export_onnx(..., fold_bn=True)`` / ``neonlite export --fold-bn``: each BatchNorm right after
a Convolution or Linear is folded into its weights (no BatchNormalization node is left for
it) and ONNX Runtime's output stays within 1e-5 of neonlite's ``predict`` (relative to the
largest value) at two batch sizes; a BatchNorm after anything else is still written."""
import numpy as np
import pytest

import neonlite.layers as L
from neonlite import Model
from neonlite.data import ArrayIterator
from neonlite.initializers import Constant
from neonlite.transforms.activation import Rectlin, Tanh
from support.harness import make_backend
from support.onnx_parity import export_and_compare, randomize
from support.requires import requires

pytestmark = requires("onnx", "onnxruntime")

TOLERANCE = 1e-5
IMAGE = (7, 6, 3)
#: case -> (layers, example shape, BatchNormalization nodes left after folding)
CASES = {
    "Conv with batch norm and fused ReLU": ([L.Conv((3, 3, 5), padding=1, batch_norm=True,
                                                    activation=Rectlin())], IMAGE, 0),
    "Conv with batch norm and Tanh": ([L.Conv((3, 3, 5), strides=2, batch_norm=True,
                                              activation=Tanh())], IMAGE, 0),
    "Convolution with a bias, then BatchNorm": ([L.Convolution((3, 3, 4), bias=Constant(0.0)),
                                                 L.BatchNorm()], IMAGE, 0),
    "Affine with batch norm": ([L.Affine(5, batch_norm=True, activation=Rectlin())], (6,), 0),
    "Affine with batch norm after a conv's Flatten": (
        [L.Conv((3, 3, 4), batch_norm=True), L.Affine(5, batch_norm=True)], IMAGE, 0),
    "batch norm in a residual branch": (
        [L.Conv((3, 3, 4), padding=1), L.MergeSum([[L.Conv((3, 3, 4), padding=1,
                                                           batch_norm=True)],
                                                   [L.SkipNode()]])], IMAGE, 0),
    "BatchNorm first (nothing to fold into)": ([L.BatchNorm(), L.Conv((3, 3, 4),
                                                                      batch_norm=True)],
                                               IMAGE, 1),
    "BatchNorm after a ReLU convolution (not foldable)": (
        [L.Convolution((3, 3, 4), activation=Rectlin()), L.BatchNorm()], IMAGE, 1),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_folded_batch_norm_matches_onnx_runtime(case, tmp_path):
    import onnx
    layers, in_shape, left = CASES[case]
    make_backend("cpu", batch_size=4)
    model = Model(layers)
    model.initialize(ArrayIterator(np.zeros((4,) + in_shape, np.float32), shuffle=False))
    randomize(model)
    rng = np.random.default_rng(1)
    inputs = [rng.normal(size=(n,) + in_shape).astype(np.float32) for n in (3, 7)]
    path = tmp_path / "folded.onnx"
    difference = export_and_compare(model, path, inputs, fold_bn=True)
    assert difference <= TOLERANCE, f"{case}: max relative difference {difference:.3g}"
    ops = [node.op_type for node in onnx.load(str(path)).graph.node]
    assert ops.count("BatchNormalization") == left, ops
    model.export_onnx(tmp_path / "plain.onnx")
    plain = [node.op_type for node in onnx.load(str(tmp_path / "plain.onnx")).graph.node]
    assert plain.count("BatchNormalization") >= 1, plain
