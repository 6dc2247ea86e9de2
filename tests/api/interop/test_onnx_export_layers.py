"""Every exported layer type, alone, gives ONNX Runtime's CPU output within 1e-5 of neonlite's
``predict`` (relative to the largest value, float32), at two batch sizes (neither the
backend's), and every layer class of ``neonlite.layers`` has an exporter or is on the
explicit list of those that do not yet."""
import inspect

import numpy as np
import pytest

import neonlite.layers as L
from neonlite import Model
from neonlite.data import ArrayIterator
from neonlite.transforms.activation import Gelu, Identity, Logistic, Rectlin, Softmax, Tanh
from support.harness import make_backend
from support.onnx_parity import (export_and_compare, export_and_compare_lengths, onnx_outputs,
                                 randomize, relative_difference)
from support.requires import requires

pytestmark = requires("onnx", "onnxruntime")

TOLERANCE = 1e-5
BATCHES = (3, 7)

#: Layer classes without an exporter yet (issue 35): none today.  A new layer class goes here,
#: with a comment saying what its export needs, until it has an exporter; a class on neither
#: side fails test_every_layer_class_exports_or_is_listed, and a listed class that exports
#: fails it too, so the list only shrinks.
NOT_YET_EXPORTED = set()
#: Exported classes with a parity test of their own (not in CASES / SEQUENCE_CASES).
OWN_TESTS = {"SegmentEmbedding"}  # test_segment_embedding_takes_its_ids_as_a_second_input
#: Bases and the cost, which are not layers of an exported network.
NOT_LAYERS = {"Layer", "ParameterLayer", "GeneralizedCost"}

IMAGE = (7, 6, 3)
CASES = {
    "Linear": ([L.Linear(5)], (6,)),
    "Linear on an image": ([L.Linear(4)], IMAGE),
    "Linear per token": ([L.Linear(4)], (5, 6)),
    "Bias": ([L.Bias()], (6,)),
    "Bias on an image after a conv": ([L.Convolution((3, 3, 4)), L.Bias()], IMAGE),
    "Affine": ([L.Affine(5, activation=Rectlin())], (6,)),
    "Affine with batch norm": ([L.Affine(5, batch_norm=True, activation=Tanh())], (6,)),
    "ReLU": ([L.Activation(Rectlin())], IMAGE),
    "leaky ReLU": ([L.Activation(Rectlin(slope=0.1))], (6,)),
    "Logistic": ([L.Activation(Logistic())], (6,)),
    "Tanh": ([L.Activation(Tanh())], (6,)),
    "Identity": ([L.Activation(Identity())], (6,)),
    "GELU erf": ([L.Activation(Gelu())], (6,)),
    "GELU tanh": ([L.Activation(Gelu("tanh"))], (6,)),
    "Softmax": ([L.Activation(Softmax())], (6,)),
    "Softmax on an image's channels": ([L.Convolution((1, 1, 4)), L.Activation(Softmax())],
                                       IMAGE),
    "Dropout": ([L.Dropout(0.5), L.Linear(3)], (6,)),
    "Convolution": ([L.Convolution((3, 3, 4), strides=2, padding=1, dilation=1)], IMAGE),
    "Convolution dilated": ([L.Convolution((3, 2, 4), padding=(2, 1), dilation=2)], IMAGE),
    "Conv with bias and ReLU": ([L.Conv((3, 3, 5), padding=1, activation=Rectlin())], IMAGE),
    "Conv with batch norm and GELU": ([L.Conv((3, 3, 5), batch_norm=True,
                                              activation=Gelu())], IMAGE),
    "Deconvolution": ([L.Deconvolution((3, 3, 4), strides=2, padding=1, output_padding=1)],
                      IMAGE),
    "Deconv with bias and Logistic": ([L.Deconv((2, 3, 4), strides=(2, 1),
                                                activation=Logistic())], IMAGE),
    "max Pooling": ([L.Pooling(2)], IMAGE),
    "max Pooling padded, overlapping": ([L.Pooling(3, strides=2, padding=1)], IMAGE),
    "avg Pooling": ([L.Pooling(2, op="avg")], IMAGE),
    "avg Pooling padded (padding not counted)": ([L.Pooling(3, strides=1, padding=1,
                                                            op="avg")], IMAGE),
    "BatchNorm on an image": ([L.BatchNorm()], IMAGE),
    "BatchNorm with ReLU": ([L.BatchNorm(activation=Rectlin())], IMAGE),
    "BatchNorm on a sequence": ([L.BatchNorm()], (5, 4)),
    "LayerNorm": ([L.LayerNorm()], (6,)),
    "LayerNorm per token, no bias": ([L.LayerNorm(bias=False, eps=1e-12)], (5, 6)),
    "LayerNorm on an image after a conv": ([L.Convolution((1, 1, 4)), L.LayerNorm()], IMAGE),
    "LRN on an image": ([L.Convolution((1, 1, 6)), L.LRN(depth=3, alpha=0.1)], IMAGE),
    "LRN on a sequence": ([L.LRN(depth=3, alpha=0.5)], (5, 4)),
    "LRN on vectors": ([L.LRN(depth=5, alpha=0.2, beta=0.5, k=2.0)], (6,)),
    "Flatten after a conv": ([L.Convolution((3, 3, 4)), L.Flatten()], IMAGE),
    "Reshape": ([L.Reshape((3, -1))], IMAGE),
    "Reshape after a conv": ([L.Convolution((3, 3, 4)), L.Reshape((-1, 4))], IMAGE),
    "MergeSum residual": ([L.Convolution((1, 1, 3)),
                           L.MergeSum([[L.Conv((3, 3, 3), padding=1, batch_norm=True,
                                                activation=Rectlin())], [L.SkipNode()]])],
                          IMAGE),
    "MergeBroadcast concat": ([L.MergeBroadcast([[L.Conv((1, 1, 2))],
                                                 [L.Pooling(3, strides=1, padding=1)]])],
                              IMAGE),
    "MergeBroadcast concat of vectors": ([L.MergeBroadcast([[L.Linear(2)], [L.Linear(3)]])],
                                         (6,)),
    "MergeBroadcast sum": ([L.MergeBroadcast([[L.Linear(2)], [L.Linear(2)]], merge="sum")],
                           (6,)),
}


VOCAB, D, WIDE = 11, 6, 16
LENGTHS = (5, 3)
#: sequence cases: T -> (layers, input kind): "ids" token ids (T,), "float" (T, D), "wide"
#: (T, WIDE) (block-sparse layers take multiples of their block size)
SEQUENCE_CASES = {
    "Embedding": (lambda T: [L.Embedding(VOCAB, D)], "ids"),
    "Embedding, learned positions, tied head": (
        lambda T: [L.Embedding(VOCAB, D, name="tok"), L.PositionalEmbedding(8),
                   L.TiedLinear("tok")], "ids"),
    "sinusoidal positions": (lambda T: [L.PositionalEmbedding(8, sinusoidal=True)], "float"),
    "Linear per token + LayerNorm + GELU": (
        lambda T: [L.Linear(4), L.LayerNorm(), L.Activation(Gelu())], "float"),
    "RecurrentLast": (lambda T: [L.Linear(4), L.RecurrentLast()], "float"),
    "FirstToken and a pooler": (lambda T: [L.FirstToken(), L.Affine(4, activation=Tanh())],
                                "float"),
    "RMSNorm per token": (lambda T: [L.Linear(6), L.RMSNorm(eps=1e-6)], "float"),
    "TransformerBlock with RMSNorm, pre and post": (
        lambda T: [L.Embedding(VOCAB, D, name="tok"),
                   L.TransformerBlock(D, 2, norm_type="rms", bias=False),
                   L.TransformerBlock(D, 2, norm_type="rms", norm="post", causal=False),
                   L.RMSNorm(), L.TiedLinear("tok")], "ids"),
    "RecurrentSum": (lambda T: [L.RecurrentSum()], "float"),
    "RecurrentMean": (lambda T: [L.RecurrentMean()], "float"),
    "MeanPool": (lambda T: [L.MeanPool()], "float"),
    "MeanPool over the real tokens, L2Normalize": (
        lambda T: [L.Embedding(VOCAB, D, pad_id=0), L.MeanPool(), L.L2Normalize()], "ids"),
    "L2Normalize per token": (lambda T: [L.L2Normalize()], "float"),
    "BatchNorm and LRN per token": (lambda T: [L.BatchNorm(), L.LRN(3)], "float"),
    "MultiHeadAttention": (lambda T: [L.MultiHeadAttention(D, 2)], "float"),
    "MultiHeadAttention causal, no bias": (
        lambda T: [L.MultiHeadAttention(D, 3, causal=True, bias=False)], "float"),
    "MultiHeadAttention, padding mask": (
        lambda T: [L.Embedding(VOCAB, D, pad_id=0), L.MultiHeadAttention(D, 2)], "ids"),
    "TransformerBlock pre-norm, causal + padding": (
        lambda T: [L.Embedding(VOCAB, D, pad_id=0, name="tok"), L.PositionalEmbedding(8),
                   L.TransformerBlock(D, 2, dropout=0.1), L.LayerNorm(), L.TiedLinear("tok")],
        "ids"),
    "TransformerBlock post-norm, tanh GELU, no bias": (
        lambda T: [L.Embedding(VOCAB, D), L.TransformerBlock(D, 3, causal=False, norm="post",
                                                               gelu="tanh", bias=False,
                                                               eps=1e-12), L.RecurrentLast()],
        "ids"),
    "Recurrent": (lambda T: [L.Recurrent(4)], "float"),
    "Recurrent ReLU reversed, final state": (
        lambda T: [L.Recurrent(4, activation=Rectlin(), reverse=True, return_sequences=False)],
        "float"),
    "LSTM": (lambda T: [L.LSTM(5)], "float"),
    "LSTM reversed, final state": (lambda T: [L.LSTM(5, reverse=True, return_sequences=False)],
                                   "float"),
    "LSTM on embeddings, RecurrentLast": (
        lambda T: [L.Embedding(VOCAB, D), L.LSTM(5, gate_activation=Tanh(),
                                                 activation=Logistic()), L.RecurrentLast()],
        "ids"),
    "GRU": (lambda T: [L.GRU(5)], "float"),
    "GRU reversed, final state": (lambda T: [L.GRU(5, reverse=True, return_sequences=False)],
                                  "float"),
    "BiRNN summed": (lambda T: [L.BiRNN(4, merge="sum")], "float"),
    "BiLSTM final states": (lambda T: [L.BiLSTM(3, return_sequences=False)], "float"),
    "BiGRU": (lambda T: [L.BiGRU(3)], "float"),
    "DeepBiRNN": (lambda T: [L.DeepBiRNN(3, depth=2)], "float"),
    "DeepBiLSTM, final states": (lambda T: [L.DeepBiLSTM(3, depth=2, return_sequences=False)],
                                 "float"),
    "BlockSparseLinear per token": (
        lambda T: [L.BlockSparseLinear(16, {"random": {"density": 0.5, "seed": 0}},
                                       block_size=8)], "wide"),
    "BlockSparseAffine on vectors": (
        lambda T: [L.RecurrentMean(), L.BlockSparseAffine(
            16, [[1, 0], [1, 1]], block_size=8, activation=Tanh())], "wide"),
    "BlockSparseAttention (fixed length)": (
        lambda T: [L.BlockSparseAttention(2, [[[1, 0], [1, 1]], [[0, 0], [1, 1]]],
                                          block_size=8, causal=False)], "wide16"),
    "TransformerBlock with BlockSparseAttention, causal": (
        lambda T: [L.TransformerBlock(WIDE, 2, attention=L.BlockSparseAttention(
            2, {"local": {"window": 1}}, block_size=8))], "wide16"),
    "tied head on vectors": (lambda T: [L.Embedding(VOCAB, D, name="tok"), L.RecurrentMean(),
                                        L.TiedLinear("tok")], "ids"),
}


def sequence_inputs(kind, T, seed=2):
    """Batches of ``BATCHES`` sizes: token ids (some 0, the pad id; the first sequence starts
    with a pad, so a causal query sees no key; the last is one real token and pads) or (T, D)
    floats."""
    rng = np.random.default_rng(seed + T)
    if kind != "ids":
        width = D if kind == "float" else WIDE
        return [rng.normal(size=(n, T, width)).astype(np.float32) for n in BATCHES]
    out = []
    for n in BATCHES:
        ids = rng.integers(0, VOCAB, (n, T))
        ids[:, 0] = rng.integers(1, VOCAB, n)
        ids[0, 0] = 0
        ids[-1, 1:] = 0
        out.append(ids.astype(np.float32))
    return out


@pytest.mark.parametrize("case", sorted(SEQUENCE_CASES))
def test_sequence_layer_matches_onnx_runtime_at_two_lengths(case, tmp_path):
    """Two lengths on one exported file, whose time axis is ``steps``; a "wide16" case
    (a block-sparse attention layout made for T=16) at its one length, the axis fixed."""
    make_layers, kind = SEQUENCE_CASES[case]
    width = {"float": D, "wide": WIDE, "wide16": WIDE}.get(kind)
    lengths = (16,) if kind == "wide16" else LENGTHS

    def model(T):
        return initialized(make_layers(T), (T,) if kind == "ids" else (T, width))
    path = tmp_path / "sequence.onnx"
    difference = export_and_compare_lengths(model, lambda T: sequence_inputs(kind, T), path,
                                            lengths)
    assert difference <= TOLERANCE, f"{case}: max relative difference {difference:.3g}"
    import onnx
    (feed,) = onnx.load(str(path)).graph.input
    time = feed.type.tensor_type.shape.dim[1]
    assert (time.dim_value, time.dim_param) == ((16, "") if kind == "wide16" else (0, "steps"))


def initialized(layers, in_shape, seed=0):
    """A model of ``layers`` for examples of ``in_shape`` (backend batch 4), with random
    parameters and running statistics."""
    make_backend("cpu", batch_size=4)
    model = Model(layers)
    model.initialize(ArrayIterator(np.zeros((4,) + in_shape, np.float32), shuffle=False))
    randomize(model, seed)
    return model


def batches(in_shape, seed=1):
    rng = np.random.default_rng(seed)
    return [rng.normal(size=(n,) + in_shape).astype(np.float32) for n in BATCHES]


@pytest.mark.parametrize("case", sorted(CASES))
def test_layer_matches_onnx_runtime(case, tmp_path):
    layers, in_shape = CASES[case]
    model = initialized(layers, in_shape)
    difference = export_and_compare(model, tmp_path / "layer.onnx", batches(in_shape))
    assert difference <= TOLERANCE, f"{case}: max relative difference {difference:.3g}"


def layer_classes():
    return {name: cls for name, cls in vars(L).items()
            if inspect.isclass(cls) and issubclass(cls, L.Layer) and name not in NOT_LAYERS}


def test_every_layer_class_exports_or_is_listed():
    from neonlite.interop.onnx import EXPORTERS
    exported = {cls.__name__ for cls in EXPORTERS}
    classes = layer_classes()
    missing = sorted(n for n in classes if n not in exported and n not in NOT_YET_EXPORTED)
    assert not missing, f"layer classes with no ONNX exporter and not on NOT_YET_EXPORTED: " \
                        f"{missing}"
    stale = sorted(n for n in NOT_YET_EXPORTED if n in exported or n not in classes)
    assert not stale, f"NOT_YET_EXPORTED lists classes that export (or do not exist): {stale}"


def test_every_exported_class_has_a_parity_case():
    """Each registered exporter (but the plain containers) is run by some case above."""
    from neonlite.interop.onnx import EXPORTERS
    used = set()
    everything = list(CASES.values()) + [(make(4), None) for make, _ in SEQUENCE_CASES.values()]
    for layers, _ in everything:
        stack = list(layers)
        while stack:
            layer = stack.pop()
            used.add(type(layer).__name__)
            stack.extend(getattr(layer, "layers", []))
            stack.extend(getattr(layer, "branches", []))
    unused = sorted(c.__name__ for c in EXPORTERS
                    if c.__name__ not in used | {"Sequential", "CompoundLayer"} | OWN_TESTS)
    assert not unused, f"exporters no parity case runs: {unused}"


def test_batch_axis_is_dynamic_and_names_come_from_layers(tmp_path):
    import onnx
    model = initialized([L.Conv((3, 3, 4), name="conv1"), L.Flatten(name="flat"),
                         L.Affine(3, name="fc")], IMAGE)
    model.export_onnx(tmp_path / "m.onnx")
    proto = onnx.load(str(tmp_path / "m.onnx"))
    (feed,), (out,) = proto.graph.input, proto.graph.output
    assert feed.type.tensor_type.shape.dim[0].dim_param == "batch"
    assert [d.dim_value for d in feed.type.tensor_type.shape.dim[1:]] == list(IMAGE)
    assert out.type.tensor_type.shape.dim[0].dim_param == "batch"
    assert {"conv1.W", "conv1.b", "fc.W", "fc.b"} <= {t.name for t in proto.graph.initializer}
    transposes = [n for n in proto.graph.node if n.op_type == "Transpose"]
    assert len(transposes) == 2, "NHWC in, one Transpose to NCHW and one back before Flatten"
    assert proto.opset_import[0].version == 17
    meta = {p.key: p.value for p in proto.metadata_props}
    from neonlite.version import __version__
    assert meta["neonlite_version"] == __version__ and '"conv1"' in meta["description"]


def test_opset_older_than_a_layer_needs_names_the_layer(tmp_path):
    from neonlite.interop.onnx import OnnxExportError
    model = initialized([L.Linear(4, name="fc"), L.LayerNorm(name="norm")], (6,))
    with pytest.raises(OnnxExportError, match=r"layer 'norm' \(LayerNorm\) needs ONNX opset 17"):
        model.export_onnx(tmp_path / "m.onnx", opset=16)
    assert not (tmp_path / "m.onnx").exists()
    model.export_onnx(tmp_path / "m.onnx", opset=18)


def test_segment_embedding_takes_its_ids_as_a_second_input(tmp_path):
    """BERT's token + segment + position embeddings: the segment ids are the graph's second
    input; zeros are neonlite's default (no ids set: segment 0), and ids set on the layer
    (one batch of the backend's size) give the same output as ONNX Runtime fed them."""
    path, worst, exported = tmp_path / "segments.onnx", 0.0, None
    for T in LENGTHS:
        model = initialized([L.Embedding(VOCAB, D), L.SegmentEmbedding(2, name="seg"),
                             L.PositionalEmbedding(8)], (T,))
        if exported is None:
            model.export_onnx(path)
            exported = model
        model.set_params(exported.get_params())
        for x in sequence_inputs("ids", T):
            zeros = {"seg.segment_ids": np.zeros(x.shape, np.float32)}
            worst = max(worst, relative_difference(model.predict(x), onnx_outputs(path, x, zeros)))
        x = sequence_inputs("ids", T)[0][:1].repeat(4, axis=0)
        segments = (np.arange(T)[None, :] >= np.array([[1], [2], [T], [0]])).astype(np.float32)
        model.layers.layers[1].segment_ids = model.be.array(segments)
        worst = max(worst, relative_difference(
            model.predict(x), onnx_outputs(path, x, {"seg.segment_ids": segments})))
    assert worst <= TOLERANCE, f"max relative difference {worst:.3g}"


def test_branches_share_one_transpose_of_their_input(tmp_path):
    """A merge whose branches all start with an NCHW op transposes the NHWC input once."""
    import onnx
    model = initialized([L.MergeBroadcast([[L.Conv((1, 1, 2))], [L.Pooling(3, strides=1,
                                                                              padding=1)],
                                           [L.Conv((3, 3, 2), padding=1)]])], IMAGE)
    model.export_onnx(tmp_path / "m.onnx")
    nodes = onnx.load(str(tmp_path / "m.onnx")).graph.node
    assert sum(n.op_type == "Transpose" for n in nodes) == 2, "one in, one out"


@pytest.mark.parametrize("opset", [13, 21])
def test_every_case_at_the_oldest_opset_and_a_newer_one(opset, tmp_path):
    """Opset 13 (the oldest written; a layer needing 17, LayerNorm, refused by name) and 21
    (ReduceMean's axes an input, from 18) give the same outputs as opset 17."""
    from neonlite.interop.onnx import OnnxExportError
    worst, refused = 0.0, []
    for case, (layers, in_shape) in sorted(CASES.items()):
        model = initialized(layers, in_shape)
        try:
            worst = max(worst, export_and_compare(model, tmp_path / "m.onnx", batches(in_shape),
                                                  opset=opset))
        except OnnxExportError as err:
            assert opset < 17 and "needs ONNX opset 17" in str(err), (case, str(err))
            refused.append(case)
    for case, (make_layers, kind) in sorted(SEQUENCE_CASES.items()):
        width = {"float": D, "wide": WIDE, "wide16": WIDE}.get(kind)
        T = 16 if kind == "wide16" else LENGTHS[0]
        model = initialized(make_layers(T), (T,) if kind == "ids" else (T, width))
        try:
            worst = max(worst, export_and_compare(model, tmp_path / "s.onnx",
                                                  sequence_inputs(kind, T), opset=opset))
        except OnnxExportError as err:
            assert opset < 17 and "needs ONNX opset 17" in str(err), (case, str(err))
            refused.append(case)
    assert worst <= TOLERANCE, f"opset {opset}: max relative difference {worst:.3g}"
    assert bool(refused) == (opset < 17) and all("LayerNorm" in c or "Transformer" in c
                                                  for c in refused), refused
