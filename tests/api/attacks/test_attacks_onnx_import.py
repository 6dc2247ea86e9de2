"""Hostile and bad ``.onnx`` files given to ``neonlite import``: corrupt, truncated or empty
files, a FIFO, a tensor whose data is in an external file, a tensor claiming more values
than it holds, a cycle, an unknown tensor name, an operator outside the subset, a grouped
convolution, two graph inputs, and an output path that is a folder.  Each case runs in its
own process under a time and memory bound (``support.isolated``) and must end in one
``neonlite: error:`` line naming what is wrong, with no file left behind; the table of
cases is written to the test's temporary folder."""
import os

import numpy as np
import pytest

from support.isolated import AttackTable, neonlite_argv, run_isolated
from support.requires import requires

pytestmark = requires("onnx")


def small_cnn(onnx, mutate=None):
    """A valid ModelProto: X (N, 1, 4, 4) -> Conv 3x3 (2) -> Relu -> Flatten -> Gemm (3);
    ``mutate(graph_parts)`` edits the nodes / initializers before the graph is made."""
    h, rng = onnx.helper, np.random.default_rng(0)
    parts = {
        "nodes": [h.make_node("Conv", ["X", "W", "B"], ["c"], name="conv", pads=[1, 1, 1, 1]),
                  h.make_node("Relu", ["c"], ["r"], name="relu"),
                  h.make_node("Flatten", ["r"], ["f"], name="flat"),
                  h.make_node("Gemm", ["f", "G", "GB"], ["Y"], name="fc", transB=1)],
        "inits": [onnx.numpy_helper.from_array(rng.normal(size=s).astype(np.float32), n)
                  for n, s in (("W", (2, 1, 3, 3)), ("B", (2,)), ("G", (3, 32)),
                               ("GB", (3,)))],
        "inputs": [h.make_tensor_value_info("X", onnx.TensorProto.FLOAT, ["N", 1, 4, 4])]}
    if mutate:
        mutate(parts, onnx)
    graph = h.make_graph(parts["nodes"], "small", parts["inputs"],
                         [h.make_tensor_value_info("Y", onnx.TensorProto.FLOAT, ["N", 3])],
                         initializer=parts["inits"])
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])


def external_data(parts, onnx):
    w = parts["inits"][0]
    w.ClearField("raw_data")
    w.ClearField("float_data")
    w.data_location = onnx.TensorProto.EXTERNAL
    entry = w.external_data.add()
    entry.key, entry.value = "location", "/etc/passwd"


def huge_claim(parts, onnx):
    parts["inits"][1].dims[:] = [1 << 40]


def cycle(parts, onnx):
    parts["nodes"][1].input[0] = "f"


def unknown_name(parts, onnx):
    parts["nodes"][2].input[0] = "nowhere"


def unsupported(parts, onnx):
    parts["nodes"].insert(2, onnx.helper.make_node("Sin", ["r"], ["s"], name="weird"))
    parts["nodes"][3].input[0] = "s"


def grouped(parts, onnx):
    parts["nodes"][0].attribute.append(onnx.helper.make_attribute("group", 2))


def joined_by_mul(parts, onnx):
    """relu(c) * c: two branches of c joined by a Mul (a gate no layer expresses)."""
    parts["nodes"].insert(2, onnx.helper.make_node("Mul", ["r", "c"], ["m"], name="gate"))
    parts["nodes"][3].input[0] = "m"


def nested_forks(parts, onnx):
    """150 residual Adds each inside a branch of the one before: r + (r + (r + ...))."""
    h, nodes = onnx.helper, parts["nodes"]
    inner = "r"
    for i in range(150):
        nodes.append(h.make_node("Relu", [inner], [f"n{i}"], name=f"relu{i}"))
        inner = f"n{i}"
    for i in reversed(range(150)):
        source = "r" if i == 0 else f"n{i - 1}"
        nodes.append(h.make_node("Add", [source, inner], [f"a{i}"], name=f"add{i}"))
        inner = f"a{i}"
    nodes[2].input[0] = inner
    nodes.append(nodes.pop(2))
    nodes.append(nodes.pop(2))


def two_inputs(parts, onnx):
    parts["inputs"].append(onnx.helper.make_tensor_value_info("Z", onnx.TensorProto.FLOAT,
                                                              ["N", 3]))


CASES = {
    "a tensor with its data in an external file": (external_data,
                                                   "tensor 'W' keeps its data in an external"),
    "a tensor claiming 2^40 values": (huge_claim, "holds data for 2 "),
    "a cycle": (cycle, "the graph has a cycle through node"),
    "an unknown tensor name": (unknown_name, "takes tensor 'nowhere', which no node"),
    "an operator outside the subset": (unsupported, "node 'weird' (Sin): operator Sin is not "
                                                    "supported"),
    "a grouped convolution": (grouped, "node 'conv' (Conv): group 2"),
    "two graph inputs": (two_inputs, "2 data input(s)"),
    "branches joined by Mul": (joined_by_mul, "node 'gate' (Mul): operator Mul is not supported"),
    "branches nested 150 deep": (nested_forks, "branches nest more than 100 deep"),
}


def import_(path, output):
    return run_isolated(neonlite_argv("import", path, "-o", output), memory_mib=2048,
                        seconds=120)


def test_bad_onnx_files_fail_in_one_line_and_leave_nothing(tmp_path):
    import onnx
    table = AttackTable(tmp_path / "attacks.tsv")
    inputs, out = tmp_path / "in", tmp_path / "out"
    inputs.mkdir()
    out.mkdir()
    (out / "folder.h5").mkdir()
    good = small_cnn(onnx).SerializeToString()
    (inputs / "good.onnx").write_bytes(good)
    (inputs / "corrupt.onnx").write_bytes(b"\x0a\xff\xff\xff\xff\x0f" + os.urandom(200))
    (inputs / "truncated.onnx").write_bytes(good[:len(good) * 2 // 3])
    (inputs / "empty.onnx").write_bytes(b"")
    os.mkfifo(inputs / "fifo.onnx")
    expected = {"corrupt bytes": ("corrupt.onnx", "not a readable ONNX model"),
                "a truncated file": ("truncated.onnx", "truncated"),
                "an empty file": ("empty.onnx", "holds no ONNX graph"),
                "a FIFO": ("fifo.onnx", "not a regular file (a FIFO"),
                "a missing file": ("absent.onnx", "no such ONNX file")}
    for attack, (mutate, message) in CASES.items():
        name = mutate.__name__ + ".onnx"
        (inputs / name).write_bytes(small_cnn(onnx, mutate).SerializeToString())
        expected[attack] = (name, message)
    results = {attack: import_(inputs / name, out / "m.h5")
               for attack, (name, _) in expected.items()}
    results["output is a folder"] = import_(inputs / "good.onnx", out / "folder.h5")
    expected["output is a folder"] = ("good.onnx", "is a folder")
    for attack, result in results.items():
        table.add(attack, result)
    for attack, result in results.items():
        assert result.outcome == "one-line error", (attack, result.outcome, result.stderr)
        assert expected[attack][1] in result.message, (attack, result.message)
    assert sorted(os.listdir(out)) == ["folder.h5"], "a failed import left a file behind"


def test_a_good_file_imports_and_the_size_cap_holds(tmp_path):
    import onnx
    from neonlite import Model
    from neonlite.interop import InteropError
    from neonlite.onnx_import import import_onnx
    path = tmp_path / "good.onnx"
    path.write_bytes(small_cnn(onnx).SerializeToString())
    result = import_(path, tmp_path / "m.h5")
    assert result.outcome == "success", result.stderr
    with pytest.raises(InteropError, match=r"more than the 100 this reader takes"):
        import_onnx(Model, path, limit=100)
