"""Hostile and bad input to ONNX export: ``neonlite export --format onnx`` with an output path
that is a folder, a symlink, a FIFO, under a regular file, or in a folder that cannot be
written; a layer ONNX cannot express (an even-depth LRN); an opset too old or unknown. A layer
class with no exporter (a user's own) is refused through the Python API. Each case runs in its
own process under a time and memory bound (``support.isolated``) and must end in one
``neonlite: error:`` line with no file (and no temporary) left behind; the table of cases is
written to the test's temporary folder."""
import os

import numpy as np
import pytest

import neonlite.layers as L
from neonlite import Model
from neonlite.data import ArrayIterator
from neonlite.transforms.activation import Rectlin, Softmax
from support.harness import make_backend
from support.isolated import AttackTable, neonlite_argv, run_isolated
from support.requires import requires

pytestmark = requires("onnx")


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """A small CNN checkpoint (exports) and one with an even-depth LRN (refused: ONNX's LRN
    centres an even window elsewhere)."""
    folder = tmp_path_factory.mktemp("checkpoints")
    make_backend("cpu", batch_size=2)
    cnn = Model([L.Conv((3, 3, 2), activation=Rectlin()), L.Flatten(),
                 L.Affine(3, activation=Softmax())])
    cnn.initialize(ArrayIterator(np.zeros((2, 5, 5, 1), np.float32), shuffle=False))
    cnn.save(folder / "cnn.h5")
    lrn = Model([L.Conv((3, 3, 4)), L.LRN(depth=4, name="norm")])
    lrn.initialize(ArrayIterator(np.zeros((2, 5, 5, 1), np.float32), shuffle=False))
    lrn.save(folder / "lrn.h5")
    return folder


def export(checkpoint, output, *more):
    return run_isolated(neonlite_argv("export", checkpoint, "--format", "onnx", "-o", output,
                                      *more), memory_mib=2048, seconds=120)


def test_bad_exports_fail_in_one_line_and_leave_nothing(checkpoints, tmp_path):
    table = AttackTable(tmp_path / "attacks.tsv")
    cnn, lrn = checkpoints / "cnn.h5", checkpoints / "lrn.h5"
    out = tmp_path / "out"
    out.mkdir()
    (out / "folder.onnx").mkdir()
    (out / "target.onnx").write_bytes(b"keep")
    os.symlink(out / "target.onnx", out / "link.onnx")
    os.mkfifo(out / "fifo.onnx")
    (out / "plain").write_text("a file, not a folder")
    before = sorted(os.listdir(out))
    cases = {
        "output is a folder": (export(cnn, out / "folder.onnx"), "is a folder"),
        "output is a symlink": (export(cnn, out / "link.onnx"), "is a symbolic link"),
        "output is a FIFO": (export(cnn, out / "fifo.onnx"), "is a FIFO"),
        "output under a regular file": (export(cnn, out / "plain" / "m.onnx"),
                                        "is not a folder"),
        "output in a folder nothing can be written to": (export(cnn, "/proc/m.onnx"),
                                                         "cannot write in /proc"),
        "output is a device": (export(cnn, "/dev/null"), "is a character device"),
        "layer that cannot be expressed": (export(lrn, out / "lrn.onnx"),
                                           "layer 'norm' (LRN): depth 4 is even"),
        "opset too old": (export(cnn, out / "old.onnx", "--opset", "12"),
                          "needs ONNX opset 13 or newer"),
        "opset unknown": (export(cnn, out / "new.onnx", "--opset", "1000"),
                          "opset must be an integer from 13"),
        "--opset with --format hf": (run_isolated(neonlite_argv(
            "export", cnn, "-o", out / "hf", "--opset", "17"), seconds=120),
            "--opset applies to --format onnx only"),
        "--fold-bn with --format hf": (run_isolated(neonlite_argv(
            "export", cnn, "-o", out / "hf", "--fold-bn"), seconds=120),
            "--fold-bn applies to --format onnx only"),
    }
    for attack, (result, expected) in cases.items():
        table.add(attack, result)
    for attack, (result, expected) in cases.items():
        assert result.outcome == "one-line error", (attack, result.outcome, result.stderr)
        assert expected in result.message, (attack, result.message)
    assert sorted(os.listdir(out)) == before, "a failed export left a file behind"
    assert (out / "target.onnx").read_bytes() == b"keep"


def test_a_good_export_replaces_a_regular_file(checkpoints, tmp_path):
    target = tmp_path / "m.onnx"
    target.write_bytes(b"old")
    result = run_isolated(neonlite_argv("export", checkpoints / "cnn.h5", "--format", "onnx",
                                        "-o", target), seconds=120)
    assert result.outcome == "success", result.stderr
    import onnx
    onnx.checker.check_model(onnx.load(str(target)), full_check=True)
    assert sorted(os.listdir(tmp_path)) == ["m.onnx"]


def test_a_layer_class_without_exporter_is_refused_by_name(tmp_path):
    """A user's own layer class (no exporter is registered for it, nor inherited)."""
    from neonlite.interop.onnx import OnnxExportError

    class Doubler(L.Activation):
        pass
    make_backend("cpu", batch_size=2)
    model = Model([L.Linear(3), Doubler(Rectlin(), name="mine")])
    model.initialize(ArrayIterator(np.zeros((2, 4), np.float32), shuffle=False))
    with pytest.raises(OnnxExportError, match=r"layer 'mine' \(Doubler\) cannot be exported"):
        model.export_onnx(tmp_path / "m.onnx")
    assert os.listdir(tmp_path) == []
