"""One {type, config} schema for YAML and Python: a Python-built model's description written
to YAML and read back is identical, and the objects built from it are equal."""
import numpy as np
import pytest

import neonlite
from neonlite import Model
from neonlite.config import ConfigError
from neonlite.config.build import build
from neonlite.config.run import RunConfig
from neonlite.config.yaml_io import dump_yaml, parse_yaml
from neonlite.initializers import Constant, Gaussian, GlorotUniform, Kaiming, Uniform
from neonlite.layers import (Activation, Affine, Bias, Conv, Convolution, Dropout, Flatten,
                             GeneralizedCost, Layer, Linear, MergeSum, Pooling, Reshape,
                             Sequential, SkipNode)
from neonlite.optimizers import (AdamW, CosineSchedule, GradientDescentMomentum,
                                 MultiOptimizer, RMSProp, StepSchedule)
from neonlite.transforms import (CrossEntropyMulti, Logistic, Rectlin, Softmax, Tanh)


def python_network():
    """A network using every container and nested-object form."""
    block = MergeSum([[Conv((3, 3, 4), padding=1, init=Kaiming(), batch_norm=True,
                            activation=Rectlin()),
                       Conv((3, 3, 4), padding=(1, 1), init=Gaussian(scale=0.1))],
                      [SkipNode()]], name="res")
    return [Conv((3, 3, 4), strides=1, padding=1, bias=Constant(0.1), activation=Rectlin(0.1)),
            Sequential([block, Activation(Rectlin())]),
            Pooling((2, 2), op="avg"),
            Dropout(keep=0.75),
            Convolution((1, 1, 2), init=Uniform(-0.2, 0.2)),
            Bias(init=Constant(0.0)),
            Flatten(),
            Reshape((-1,)),
            Linear(16, init=GlorotUniform(gain=2.0), name="hidden"),
            Activation(Tanh()),
            Affine(3, activation=Softmax())]


def python_optimizer():
    return MultiOptimizer({"default": GradientDescentMomentum(
        0.1, momentum_coef=0.9, nesterov=True, schedule=StepSchedule([2, 4], 0.1)),
        "Bias": RMSProp(decay_rate=0.9), "hidden": AdamW(2e-3, schedule=CosineSchedule(100, 10))})


def test_model_description_survives_yaml_and_rebuild():
    model = Model(python_network())
    model.cost = GeneralizedCost(CrossEntropyMulti())
    model.optimizer = python_optimizer()
    desc = model.get_description()
    text = dump_yaml(desc)
    again = parse_yaml(text)
    assert again == desc
    rebuilt = Model.from_description(again)
    assert rebuilt.get_description()["layers"] == desc["layers"]
    assert build(again["optimizer"], "optimizer", "optimizer").get_description() == \
        desc["optimizer"]
    assert build(again["cost"], "cost", "cost").get_description() == desc["cost"]


def test_rebuilt_model_has_the_same_parameters_and_outputs():
    neonlite.gen_backend("cpu", batch_size=2, rng_seed=0)
    from neonlite.serialize import ShapeStub
    a = Model(python_network())
    a.initialize(ShapeStub((8, 8, 3)))
    neonlite.gen_backend("cpu", batch_size=2, rng_seed=0)
    b = Model.from_description(parse_yaml(dump_yaml(a.get_description())))
    b.initialize(ShapeStub((8, 8, 3)))
    pa, pb = a.get_params(), b.get_params()
    assert list(pa) == list(pb)
    assert all(np.array_equal(pa[k], pb[k]) for k in pa)
    x = b.be.array(np.random.default_rng(1).random((2, 8, 8, 3)))
    ya = a.fprop(a.be.array(x.get()), inference=True).get()
    yb = b.fprop(x, inference=True).get()
    np.testing.assert_array_equal(ya, yb)


def test_named_top_level_sequential_keeps_its_parameter_names():
    inner = Sequential([Affine(4), Affine(2)], name="net")
    desc = Model(inner).get_description()
    assert [d["type"] for d in desc["layers"]] == ["Sequential"]
    neonlite.gen_backend("cpu", batch_size=2, rng_seed=0)
    from neonlite.serialize import ShapeStub
    a, b = Model(Sequential([Affine(4), Affine(2)], name="net")), Model.from_description(desc)
    for m in (a, b):
        m.initialize(ShapeStub((3,)))
    assert list(a.get_params()) == list(b.get_params())


def test_positional_and_keyword_arguments_describe_alike():
    assert Conv((3, 3, 8), 2, 1).get_description() == \
        Conv(fshape=(3, 3, 8), strides=2, padding=1).get_description() == \
        {"type": "Conv", "config": {"fshape": [3, 3, 8], "strides": 2, "padding": 1}}


def test_undescribable_argument_is_a_clear_error():
    layer = Activation(transform=lambda x: x)
    with pytest.raises(TypeError, match="cannot describe a function"):
        layer.get_description()


def test_anchors_give_the_same_description_as_written_out():
    anchored = """
init: &init {type: Gaussian, config: {scale: 0.01}}
act: &act {type: Rectlin}
layers:
  - {type: Affine, config: {nout: 8, init: *init, activation: *act}}
  - {type: Affine, config: {nout: 2, init: *init, activation: {type: Softmax}}}
"""
    written = """
layers:
  - {type: Affine, config: {nout: 8, init: {type: Gaussian, config: {scale: 0.01}},
                            activation: {type: Rectlin}}}
  - {type: Affine, config: {nout: 2, init: {type: Gaussian, config: {scale: 0.01}},
                            activation: {type: Softmax}}}
"""
    common = "dataset: shapes\ncost: CrossEntropyMulti\noptimizer: Adam\n"
    a = RunConfig.from_text(anchored + common).description()
    b = RunConfig.from_text(written + common).description()
    assert a == b
    init = a["layers"][0]["config"]["init"]
    assert init == {"type": "Gaussian", "config": {"loc": 0.0, "scale": 0.01}}


def test_shorthand_names_expand_to_the_full_form():
    text = """
dataset: shapes
layers:
  - {type: Affine, config: {nout: 2, init: Kaiming, activation: Softmax}}
cost: CrossEntropyMulti
optimizer: Adam
metric: accuracy
"""
    desc = RunConfig.from_text(text).description()
    assert desc["layers"][0]["config"]["activation"] == {"type": "Softmax", "config": {}}
    assert desc["layers"][0]["config"]["init"]["type"] == "Kaiming"
    assert desc["cost"] == {"type": "GeneralizedCost",
                            "config": {"costfunc": {"type": "CrossEntropyMulti", "config": {}}}}
    assert desc["optimizer"]["type"] == "Adam"
    assert desc["metric"] == {"type": "Accuracy", "config": {}}
    assert desc["dataset"] == {"type": "shapes", "config": {}}


def test_run_description_round_trips_through_yaml():
    text = """
backend: cpu
epochs: 3
batchsize: 8
datatype: f64
dataset: {type: shapes, config: {n: 32, size: 8, classes: 4}}
layers: [{type: Affine, config: {nout: 4, activation: {type: Logistic}}}]
cost: {type: GeneralizedCost, config: {costfunc: {type: CrossEntropyBinary}}}
optimizer:
  type: MultiOptimizer
  config:
    optimizer_mapping:
      default: {type: GradientDescentMomentum, config: {learning_rate: 1e-2}}
      Bias: {type: Adam, config: {learning_rate: 5E-4}}
callbacks:
  - {type: EarlyStopping, config: {patience: 2}}
  - {type: LearningRateSchedule, config: {schedule: {type: PowerSchedule}}}
"""
    desc = RunConfig.from_text(text).description()
    assert desc["optimizer"]["config"]["optimizer_mapping"]["default"]["config"][
        "learning_rate"] == 0.01
    assert desc["optimizer"]["config"]["optimizer_mapping"]["Bias"]["config"][
        "learning_rate"] == 5e-4
    again = RunConfig.from_text(dump_yaml(desc)).description()
    assert again == desc
    assert [c["type"] for c in desc["callbacks"]] == ["EarlyStopping", "LearningRateSchedule"]


def test_only_neonlite_classes_can_be_named():
    class Sneaky(Layer):
        pass

    with pytest.raises(ConfigError, match=r"layers\[0\].type: unknown layer 'Sneaky'"):
        build({"type": "Sneaky"}, "layer", "layers[0]")
    with pytest.raises(ConfigError, match="unknown layer 'ProgressBar'"):
        build({"type": "ProgressBar"}, "layer", "layers[0]")
    with pytest.raises(ConfigError, match="unknown callback 'ProgressBar'"):
        build({"type": "ProgressBar"}, "callback", "callbacks[0]")


def test_layers_added_in_new_modules_are_nameable():
    from neonlite.config import registry
    layers = registry.classes("layer")
    for name in ("Affine", "Conv", "MergeSum", "SkipNode", "BatchNorm", "Embedding",
                 "TransformerBlock", "LayerNorm"):
        assert name in layers
    assert "Layer" not in layers and "ParameterLayer" not in layers
    assert {"EarlyStopping", "ModelCheckpoint", "LearningRateSchedule"} <= \
        set(registry.classes("callback"))


def test_yaml_12_floats_are_numbers():
    assert parse_yaml("a: 1e-3\nb: -2.5E+2\nc: 1_000\nd: .5\n") == \
        {"a": 0.001, "b": -250.0, "c": 1000, "d": 0.5}


def test_description_of_python_and_numpy_values():
    layer = Pooling(np.int64(2), strides=(np.int32(1), 1), op="avg")
    desc = layer.get_description()
    assert desc == {"type": "Pooling", "config": {"fshape": 2, "strides": [1, 1], "op": "avg"}}
    assert type(desc["config"]["fshape"]) is int
    init = Affine(3, init=Uniform(np.float32(-0.5), 0.5)).get_description()["config"]["init"]
    assert init == {"type": "Uniform", "config": {"low": -0.5, "high": 0.5}}
    assert parse_yaml(dump_yaml(desc)) == desc


def test_logistic_and_tanh_transforms_round_trip():
    for transform in (Logistic(), Tanh(), Rectlin(slope=0.2)):
        desc = Activation(transform).get_description()
        assert build(desc, "layer", "x").get_description() == desc
