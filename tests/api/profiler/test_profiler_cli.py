"""The profiler end to end on the CPU backend: ``neonlite train --profile``, ``neonlite
profile`` (table, --json, --synthetic), ``neonlite describe --memory``, the Python
``neonlite.profile(...)`` block, and the bad inputs that must fail in one line before any
training."""
import json
import os
from pathlib import Path

import pytest

import neonlite
from neonlite import Model
from neonlite.backends.ops import OPS
from neonlite.callbacks import Callbacks
from neonlite.cli import main
from neonlite.config.run import RunConfig
from neonlite.profiler.trace import rank_path

from support.checks import assert_nested
from support.harness import CHECKOUT, make_backend


RUN = """\
epochs: 1
batchsize: 16
rng_seed: 0
eval_freq: 0
dataset: {type: shapes, config: {n: 320, size: 16, classes: 4, nvalid: 32}}
layers:
  - type: Conv
    config: {fshape: [3, 3, 8], padding: 1, batch_norm: true, activation: {type: Rectlin}}
  - {type: Pooling, config: {fshape: 2}}
  - {type: Affine, config: {nout: 32, activation: {type: Rectlin}}}
  - {type: Affine, config: {nout: 4, activation: {type: Softmax}}}
cost: CrossEntropyMulti
optimizer: {type: Adam, config: {learning_rate: 0.001}}
"""

MISSING_DATA = RUN.replace("{type: shapes, config: {n: 320, size: 16, classes: 4, nvalid: 32}}",
                           "{type: mnist, config: {download: false}}").replace(
    "nout: 4,", "nout: 10,")


@pytest.fixture
def config(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text(RUN)
    return str(path)


def _events(path):
    doc = json.loads(Path(path).read_text())
    return [e for e in doc["traceEvents"] if e["ph"] == "X"]


def test_train_profile_writes_a_nested_trace(config, tmp_path, capsys):
    trace = tmp_path / "t.json"
    assert main(["train", config, "--profile", str(trace), "--profile-steps", "2:6",
                 "--save-path", str(tmp_path / "c.h5")]) == 0
    assert f"steps 2..5 -> {trace}" in capsys.readouterr().out
    events = _events(trace)
    assert_nested(events)
    names = {e["name"] for e in events}
    for layer in ("Conv_0", "Conv_0.Convolution", "Conv_0.BatchNorm", "Pooling_1", "Affine_2",
                  "Affine_3", "cost", "optimizer", "data", "fprop_conv", "compound_dot",
                  "checkpoint"):
        assert layer in names, layer
    assert [e["name"] for e in sorted(events, key=lambda e: e["ts"]) if e["cat"] == "step"] \
        == ["step 2", "step 3", "step 4", "step 5"]
    conv = [e for e in events if e["name"] == "fprop_conv"]
    assert conv and all(e["args"]["variant"] in ("direct", "tiled", "im2col", "1x1-gemm",
                                                 "numpy") for e in conv)
    assert all(e["args"]["flops"] == 2 * 16 * 16 * 16 * 8 * 3 * 3 * 3 for e in conv)


def test_profile_table_accounts_for_the_step(tmp_path, capsys):
    # batch 128 and 32 filters: the loop's fixed 0.1-0.3 ms outside every row sat at the 5%
    # line of a batch-16 step (~1.5 ms), again of a batch-64 one once the steps got faster
    # (~2.6 ms), and of this batch-128 one with 8 filters on a 2-core Zen 3 VM once its
    # softmax and elementwise loops vectorized (94.7%, a step of ~5 ms); with 32 filters the
    # step is ~10 ms there and the rows explained 96.8-97.7% of it
    config = tmp_path / "run128.yaml"
    config.write_text(RUN.replace("batchsize: 16", "batchsize: 128").replace("n: 320", "n: 2560")
                      .replace("fshape: [3, 3, 8]", "fshape: [3, 3, 32]"))
    assert main(["profile", str(config), "--steps", "6", "--warmup", "2", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["steps_profiled"] == 6
    top = [r for r in report["layers"] if r["depth"] == 0]
    assert [r["name"] for r in top] == ["Conv_0", "Pooling_1", "Affine_2", "Affine_3"]
    total = sum(r["fprop_ms"] + r["bprop_ms"] for r in top) + sum(r["ms"] for r in
                                                                  report["rest"])
    assert total == pytest.approx(report["step_ms"], rel=1e-9)
    # the untimed remainder (callbacks, the loop) is small: the rows explain the step
    assert report["accounted_pct"] > 93.0, report["rest"]
    _assert_ops_add_up(report)
    conv = report["layers"][0]
    assert conv["params_bytes"] > 0 and conv["activations_bytes"] > 0
    linear = next(r for r in report["layers"] if r["name"] == "Affine_3.Linear")
    assert linear["params_bytes"] == 32 * 4 * 4           # its view of the parameter arena
    assert linear["optimizer_bytes"] == 2 * linear["params_bytes"]  # Adam: m and v


def _assert_ops_add_up(report):
    """Each row's parts add up to it: a layer's fprop (bprop) time is its ops' fprop (bprop)
    time, its nested layers' and the time between its ops; a step row's (cost, optimizer,
    ...) likewise without nested layers.  Every op is a row of the op table."""
    layers = report["layers"]
    for i, row in enumerate(layers):
        if row["fused"]:
            continue
        children = []
        for later in layers[i + 1:]:
            if later["depth"] <= row["depth"]:
                break
            if later["depth"] == row["depth"] + 1:
                children.append(later)
        for part in ("fprop_ms", "bprop_ms"):
            ops = sum(op[part] for op in row["ops"])
            nested = sum(child[part] for child in children)
            assert ops <= row[part] + 1e-9, (row["name"], part)
            assert ops + nested + row["between_ops"][part] == \
                pytest.approx(row[part], rel=1e-9, abs=1e-9), (row["name"], part)
    for row in report["rest"]:
        ops = sum(op["ms"] for op in row["ops"])
        assert ops <= row["ms"] + 1e-9, row["name"]
        assert ops + row["between_ops_ms"] == pytest.approx(row["ms"], rel=1e-9, abs=1e-9)
    timed = {op["name"] for row in layers + report["rest"] for op in row["ops"]}
    assert timed and timed <= set(OPS), timed - set(OPS)


def test_profile_table_shows_the_lstm_ops_under_its_layer(capsys):
    """Issue 32: ``neonlite profile examples/char_lstm.yaml`` lists the LSTM's own ops (the
    whole-sequence passes of the op table) under each LSTM layer, with their calls, times and
    FLOPs; the optimizer's and the cost's ops under their rows; the layers and the other rows
    add up to the step."""
    config = str(CHECKOUT / "examples" / "char_lstm.yaml")
    assert main(["profile", config, "--steps", "2", "--warmup", "1", "-z", "8", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    _assert_ops_add_up(report)
    lstm0 = next(r for r in report["layers"] if r["name"] == "lstm0")
    ops = {op["name"]: op for op in lstm0["ops"]}
    fprop, bprop = ops["lstm_fprop_sequence"], ops["lstm_bprop_sequence"]
    assert fprop["calls"] == 1 and fprop["fprop_ms"] > 0 and fprop["bprop_ms"] == 0
    assert bprop["calls"] == 1 and bprop["bprop_ms"] > 0 and bprop["fprop_ms"] == 0
    assert fprop["gflop_per_step"] > 0 and bprop["gflop_per_step"] > 0
    assert fprop["gflops"] > 0 and fprop["gbps"] > 0
    assert "compound_dot" in ops          # the input projection of all T steps at once
    cost = next(r for r in report["rest"] if r["name"] == "cost")
    assert [op["name"] for op in cost["ops"]] == ["softmax_cross_entropy"]
    assert report["accounted_pct"] > 95.0
    assert main(["profile", config, "--steps", "1", "--warmup", "1", "-z", "4"]) == 0
    lines = capsys.readouterr().out.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("lstm0 "))
    below = lines[first + 1:next(i for i, line in enumerate(lines) if line.startswith("lstm1 "))]
    names = [line.split()[1] for line in below if line.lstrip().startswith("·")]
    assert "lstm_fprop_sequence" in names and "lstm_bprop_sequence" in names, below
    assert any("(between ops)" in line for line in below), below


def test_profile_table_text(config, capsys):
    assert main(["profile", config, "--steps", "3", "--warmup", "1", "--synthetic"]) == 0
    out = capsys.readouterr().out
    for word in ("Conv_0", "fprop ms", "GFLOP/s", "optimizer", "data wait", "step (measured)",
                 "synthetic data"):
        assert word in out


def test_python_profile_block_restores_everything(config, tmp_path):
    run = RunConfig.from_file(config)
    make_backend(batch_size=16)
    from neonlite.cli.session import load_data
    _, data, _ = load_data(run.settings, None, 8, valid=False)
    model, cost, opt = run.build_model(), run.build_cost(), run.build_optimizer()
    fit = Model.__dict__["fit"]
    with neonlite.profile(str(tmp_path / "p.json"), steps=(1, 4)) as prof:
        model.fit(data, opt, num_epochs=1, cost=cost, callbacks=Callbacks(model, progress=False))
    assert Model.__dict__["fit"] is fit
    for leaf in [model, opt, model.cost, model.be] + model.layers.leaves():
        assert not {"fprop", "bprop", "train_step", "optimize", "compound_dot",
                    "evaluate_into"} & set(vars(leaf)), leaf
    assert "Conv_0" in prof.table()
    assert len(_events(tmp_path / "p.json")) > 0


def test_describe_memory(config, capsys):
    assert main(["describe", config, "--memory", "-z", "4"]) == 0
    out = capsys.readouterr().out
    assert "batch 4" in out and "optimizer" in out and "activations" in out
    total = out.strip().splitlines()[-2].split()
    assert "backend workspaces" in out.strip().splitlines()[-1]
    assert total[:2] == ["total", "MiB"] and float(total[-1]) > 0


@pytest.mark.parametrize("flags,message", [
    (["--profile-steps", "5:99"], "--profile-steps 5:99: outside the run, which has 20 "
                                  "training steps"),
    (["--profile-steps", "x"], "--profile-steps 'x': expected A:B"),
])
def test_bad_profile_steps_are_one_line(config, tmp_path, capsys, flags, message):
    trace = tmp_path / "t.json"
    assert main(["train", config, "-q", "--profile", str(trace), *flags]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err
    assert not trace.exists()


def test_unwritable_trace_path_fails_before_training(config, tmp_path, capsys):
    folder = tmp_path / "ro"
    folder.mkdir()
    bad = [str(tmp_path / "missing" / "t.json"), str(folder)]
    if os.geteuid() != 0:  # root writes anywhere: a read-only folder stops only others
        folder.chmod(0o500)
        bad.append(str(folder / "t.json"))
    for path in bad:
        assert main(["train", config, "--profile", path]) == 1
        err = capsys.readouterr().err
        assert err.startswith(f"neonlite: error: --profile {path}: ") and err.count("\n") == 1
        assert "epoch" not in err
    assert list(folder.iterdir()) == []


def test_profile_without_data_needs_synthetic(tmp_path, capsys):
    path = tmp_path / "mnist.yaml"
    path.write_text(MISSING_DATA)
    empty = tmp_path / "data"
    empty.mkdir()
    assert main(["profile", str(path), "--data-dir", str(empty), "--steps", "1"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "run with --synthetic" in err, err
    assert main(["profile", str(path), "--data-dir", str(empty), "--steps", "2", "--warmup",
                 "0", "--synthetic", "-z", "4"]) == 0
    assert "Affine_3" in capsys.readouterr().out


def test_rank_file_names():
    assert rank_path("t.json", 1) == "t.rank1.json"
    assert rank_path("out/trace", 0) == "out/trace.rank0.json"


def test_timeline_png(config, tmp_path):
    pytest.importorskip("matplotlib", reason="the timeline needs matplotlib (neonlite[plot])")
    from neonlite.profiler.timeline import main as timeline
    trace, png = tmp_path / "t.json", tmp_path / "t.png"
    assert main(["train", config, "-q", "--profile", str(trace), "--profile-steps", "1:4"]) == 0
    assert timeline([str(trace), str(png), "--steps", "2"]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
