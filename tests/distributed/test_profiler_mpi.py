"""``mpirun -np 2 neonlite train examples/shapes_cnn.yaml --max-batches 30 --profile t.json``
writes t.rank0.json, t.rank1.json and the merged t.json: valid trace-event JSON, every layer
in every file, slices properly nested, one process row per rank on a common clock."""
import json
import os
import subprocess
import sys

from support.harness import CHECKOUT
from support.requires import requires

from neonlite.config.run import RunConfig
from neonlite.profiler.instrument import labelled_layers

from support.checks import assert_nested

ROOT = CHECKOUT
SHAPES = ROOT / "examples" / "shapes_cnn.yaml"



pytestmark = requires("mpi")

ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
       "OMPI_MCA_rmaps_base_oversubscribe": "1", "PYTHONUNBUFFERED": "1"}


def _layer_names():
    model = RunConfig.from_file(SHAPES).build_model()
    return {label for _, _, label in labelled_layers(model.layers.layers)}


def test_two_ranks_write_rank_traces_and_a_merged_one(tmp_path):
    done = subprocess.run(
        ["mpirun", "--oversubscribe", "-np", "2", sys.executable, "-m", "neonlite.cli",
         "train", str(SHAPES), "--max-batches", "30", "-e", "1", "--eval-freq", "0", "-q",
         "--profile", "t.json"],
        cwd=tmp_path, env=dict(os.environ, **ENV), timeout=300, capture_output=True,
        text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    layers = _layer_names()
    docs = {name: json.loads((tmp_path / name).read_text())
            for name in ("t.rank0.json", "t.rank1.json", "t.json")}
    for name, doc in docs.items():
        slices = [e for e in doc["traceEvents"] if e["ph"] == "X"]
        assert all(e["dur"] >= 0 and {"name", "cat", "ts", "pid", "tid"} <= set(e)
                   for e in slices)
        assert_nested(slices)
        for pid in {e["pid"] for e in slices}:
            seen = {e["name"] for e in slices if e["pid"] == pid}
            assert layers <= seen, (name, pid, layers - seen)
            steps = [e["name"] for e in sorted(slices, key=lambda e: e["ts"])
                     if e["pid"] == pid and e["cat"] == "step"]
            assert steps == [f"step {i}" for i in range(5, 15)]
            assert any(e["cat"] == "comm" and e["pid"] == pid for e in slices)
    assert {e["pid"] for e in docs["t.rank1.json"]["traceEvents"]} == {1}
    merged = docs["t.json"]["traceEvents"]
    rows = {e["pid"]: e["args"]["name"] for e in merged if e["name"] == "process_name"}
    assert rows == {0: "rank 0", 1: "rank 1"}
    # a common clock: both ranks' step 5 begins within the same second of the barrier
    starts = [next(e["ts"] for e in merged if e["pid"] == r and e["name"] == "step 5")
              for r in (0, 1)]
    assert abs(starts[0] - starts[1]) < 1e6
