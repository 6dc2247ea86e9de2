"""Every layer of issue 21 in the files a user keeps: a model of the recurrent family (LSTM, GRU,
Recurrent, BiLSTM, BiGRU, DeepBiLSTM, the reductions) and one of the image layers (Deconv,
MergeBroadcast concat and sum, LRN) are saved as checkpoints, ``neonlite describe`` lists
each layer from the checkpoint, and ``Model.load`` rebuilds a model that computes the same
outputs."""
import numpy as np
import pytest

import neonlite
from neonlite import Model
from neonlite.cli import main
from neonlite.layers import (GRU, LRN, LSTM, BiGRU, BiLSTM, Conv, Deconv, DeepBiLSTM,
                             MergeBroadcast, Pooling, Recurrent, RecurrentLast, RecurrentMean,
                             SkipNode)
from neonlite.serialize import ShapeStub
from neonlite.transforms import Rectlin


def sequence_model():
    return Model([LSTM(6, forget_bias=1.0, stateful=True, name="lstm"),
                  GRU(5, reverse=True, name="gru"),
                  Recurrent(4, activation=Rectlin(), name="rnn"),
                  BiLSTM(3, merge="sum", forget_bias=1.0, name="bilstm"),
                  BiGRU(2, name="bigru"),
                  DeepBiLSTM(2, depth=2, forget_bias=1.0, name="deep"),
                  RecurrentMean(name="mean")]), (5, 3)


def image_model():
    inception = MergeBroadcast([[Conv((1, 1, 2), activation=Rectlin())],
                                [Conv((3, 3, 3), padding=1)],
                                [Pooling(3, strides=1, padding=1, op="max"), Conv((1, 1, 1))]],
                               merge="concat", name="inception")
    residual = MergeBroadcast([[Conv((3, 3, 6), padding=1)], [SkipNode()]], merge="sum",
                              name="residual")
    return Model([Conv((3, 3, 4), padding=1, name="conv"), LRN(3, name="lrn"), inception,
                  residual, Deconv((3, 3, 2), strides=2, padding=1, output_padding=1,
                                   name="deconv")]), (6, 6, 3)


@pytest.mark.parametrize("make, types", [
    (sequence_model, ("LSTM", "GRU", "Recurrent", "BiLSTM", "BiGRU", "DeepBiLSTM",
                      "RecurrentMean")),
    (image_model, ("LRN", "MergeBroadcast", "Deconv")),
])
def test_checkpoint_describe_and_load(tmp_path, capsys, make, types):
    neonlite.gen_backend("cpu", batch_size=2, rng_seed=0, datatype=np.float64)
    model, in_shape = make()
    model.initialize(ShapeStub(in_shape))
    x = np.random.default_rng(0).normal(size=(2,) + in_shape)
    expected = model.fprop(model.be.array(x)).get()
    path = model.save(tmp_path / "model.h5")

    capsys.readouterr()
    assert main(["describe", str(path)]) == 0
    table = capsys.readouterr().out
    rows = {line.split()[1] for line in table.splitlines()[2:] if len(line.split()) > 2}
    assert set(types) <= rows, table

    neonlite.gen_backend("cpu", batch_size=2, rng_seed=1, datatype=np.float64)
    loaded = Model.load(path)
    assert loaded.get_description()["layers"] == model.get_description()["layers"]
    np.testing.assert_array_equal(loaded.fprop(loaded.be.array(x)).get(), expected)


def test_recurrent_last_after_a_sequence_model_describes(tmp_path, capsys):
    neonlite.gen_backend("cpu", batch_size=2, rng_seed=0)
    model = Model([LSTM(4, name="lstm"), RecurrentLast(name="last")])
    model.initialize(ShapeStub((3, 2)))
    capsys.readouterr()
    assert main(["describe", str(model.save(tmp_path / "m.h5"))]) == 0
    assert "RecurrentLast" in capsys.readouterr().out
