"""Ranks started with different settings end at start-up, before any buffer is allocated, with
one line naming the rank and what differs; a bad ``NEONLITE_COLLECTIVE_TIMEOUT`` is one line.

Two ranks get different settings through mpirun's MPMD form
(``mpirun -np 1 python -m neonlite.cli train A ... : -np 1 python -m neonlite.cli train B ...``).
Before the comparison (``neonlite/distributed/run_check.py``) a different ``-d`` ended in
``realloc(): invalid old size`` (signal 6), a different ``-z`` in ``munmap_chunk()``, a
different layer shape, data set size or ``--max-batches`` in a bare ``MPI_ERR_IN_STATUS``,
and a different learning rate, optimizer or layer names trained to the end.
"""
import os
import subprocess
import sys

import pytest

from support.harness import CHECKOUT
from support.requires import requires

pytestmark = requires("mpi")

ROOT = CHECKOUT
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1", PYTHONUNBUFFERED="1")

YAML = """\
backend: cpu
epochs: 1
batchsize: 16
rng_seed: 3
eval_freq: 0
dataset:
  type: shapes
  config: {{n: {n}, size: 8, classes: 4, nclass: 4, seed: 1}}
layers:
  - {{type: Affine, config: {{name: {name}, nout: {nout}, init: {{type: Kaiming}},
      activation: {{type: Rectlin}}}}}}
  - {{type: Affine, config: {{nout: 4, init: {{type: GlorotUniform}},
      activation: {{type: Softmax}}}}}}
cost:
  type: GeneralizedCost
  config:
    costfunc: {{type: CrossEntropyMulti}}
optimizer: {optimizer}
"""
SGD = "{type: GradientDescentMomentum, config: {learning_rate: 0.01}}"
BASE = {"n": 64, "name": "hidden", "nout": 32, "optimizer": SGD}


def _yaml(folder, tag, **changes):
    path = folder / f"{tag}.yaml"
    path.write_text(YAML.format(**{**BASE, **changes}))
    return path


def _rank(yaml, flags):
    """One rank's part of an MPMD command line (``--max-batches 2`` unless ``flags`` say)."""
    limit = [] if "--max-batches" in flags else ["--max-batches", "2"]
    return ["-np", "1", sys.executable, "-m", "neonlite.cli", "train", str(yaml), "-q",
            *limit, *flags]


def launch(first, second, env=None, timeout=120):
    """mpirun with rank 0 running ``first`` and rank 1 ``second`` (argument lists of
    :func:`_rank`)."""
    command = ["mpirun", "--oversubscribe", *first, ":", *second]
    return subprocess.run(command, cwd=ROOT, env=env or ENV, timeout=timeout,
                          capture_output=True, text=True, stdin=subprocess.DEVNULL)


def _neonlite_lines(done):
    return [line for line in done.stderr.splitlines() if line.startswith("neonlite:")]


def _assert_one_line(done, expected):
    text = done.stdout + done.stderr
    assert done.returncode != 0, text[-3000:]
    for bad in ("signal", "realloc", "munmap", "MPI_ERR", "Traceback", "corrupt"):
        assert bad not in text, text[-3000:]
    lines = _neonlite_lines(done)
    assert len(lines) == 1, text[-3000:]
    assert lines[0] == f"neonlite: error: {expected}; start every rank with the same settings"


CASES = {
    "datatype": ({}, ["-d", "f32"], {}, ["-d", "f64"],
                 "rank 1's datatype (-d) is 'f64', rank 0's is 'f32'"),
    "batch size": ({}, ["-z", "16"], {}, ["-z", "32"],
                   "rank 1's batch size (-z) is 32, rank 0's is 16"),
    "layer shape": ({}, [], {"nout": 16}, [],
                    "rank 1's layers[0].config.nout is 16, rank 0's is 32"),
    "data set size": ({}, [], {"n": 96}, [],
                      "rank 1's dataset.config.n is 96, rank 0's is 64"),
    "max batches": ({}, [], {}, ["--max-batches", "3"],
                    "rank 1's --max-batches is 3, rank 0's is 2"),
    "learning rate": ({}, [], {"optimizer": SGD.replace("0.01", "0.02")}, [],
                      "rank 1's optimizer.config.learning_rate is 0.02, rank 0's is 0.01"),
    "optimizer": ({}, [], {"optimizer": "{type: Adam}"}, [],
                  "rank 1's optimizer.type is 'Adam', rank 0's is 'GradientDescentMomentum'"),
    "layer names": ({}, [], {"name": "other"}, [],
                    "rank 1's layers[0].config.name is 'other', rank 0's is 'hidden'"),
    "seed": ({}, ["-r", "3"], {}, ["-r", "4"], "rank 1's rng_seed (-r) is 4, rank 0's is 3"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_ranks_with_different_settings_end_in_one_line(tmp_path, case):
    changes0, flags0, changes1, flags1, expected = CASES[case]
    first = _rank(_yaml(tmp_path, "rank0", **changes0), flags0)
    second = _rank(_yaml(tmp_path, "rank1", **changes1), flags1)
    _assert_one_line(launch(first, second), expected)


def test_ranks_with_the_same_settings_train(tmp_path):
    yaml = _yaml(tmp_path, "same")
    done = launch(_rank(yaml, []), _rank(yaml, []))
    assert done.returncode == 0, done.stderr[-3000:]
    assert not _neonlite_lines(done), done.stderr


@pytest.mark.parametrize("value", ["0", "-1", "abc", "nan", "", "inf"])
def test_a_bad_collective_timeout_is_one_line(tmp_path, value):
    yaml = _yaml(tmp_path, "same")
    env = dict(ENV, NEONLITE_COLLECTIVE_TIMEOUT=value)
    done = launch(_rank(yaml, []), _rank(yaml, []), env=env)
    text = done.stdout + done.stderr
    assert done.returncode != 0
    assert "Traceback" not in text and "OverflowError" not in text, text[-3000:]
    lines = set(_neonlite_lines(done))
    assert lines == {f"neonlite: error: NEONLITE_COLLECTIVE_TIMEOUT={value!r}: expected a "
                     f"number of seconds in (0, 1000000]"}, text[-3000:]


API_RANK = """\
import sys
import numpy as np
import neonlite
from neonlite import Model
from neonlite.data import ArrayIterator
from neonlite.distributed import DataParallel, DistributedError, detect_world
from neonlite.initializers import Gaussian
from neonlite.layers import Affine, GeneralizedCost
from neonlite.optimizers import GradientDescentMomentum
from neonlite.transforms import CrossEntropyMulti, Softmax
nout, dtype = int(sys.argv[1]), sys.argv[2]
world = detect_world()
neonlite.gen_backend("cpu", batch_size=8, rng_seed=0, datatype=np.dtype(dtype))
model = Model([Affine(nout=nout, init=Gaussian(), activation=Softmax(), name="hidden")])
data = ArrayIterator(np.ones((16, 6), dtype), np.zeros(16, np.int32), nclass=nout)
DataParallel(world).attach(model)
try:
    model.fit(data, GradientDescentMomentum(0.1), 1, GeneralizedCost(CrossEntropyMulti()),
              progress=False)
except DistributedError as err:
    print(f"rank {world.rank}: {err}", file=sys.stderr)
    sys.exit(3)
"""


@pytest.mark.parametrize("second,expected", [
    (["4", "float32"], "rank 1's parameters.hidden.W.shape[1] is 4, rank 0's is 3"),
    (["3", "float64"], "rank 1's parameters.hidden.W.dtype is 'float64', rank 0's is "
                       "'float32'")])
def test_python_api_ranks_with_different_models_raise_before_the_broadcast(second, expected):
    """Through the Python API (DataParallel.start): every rank raises one DistributedError
    naming what differs, before any buffer crosses the ranks."""
    rank = ["-np", "1", sys.executable, "-c", API_RANK]
    done = launch([*rank, "3", "float32"], [*rank, *second])
    text = done.stdout + done.stderr
    for bad in ("signal", "realloc", "munmap", "MPI_ERR", "Traceback"):
        assert bad not in text, text[-3000:]
    lines = sorted(line for line in done.stderr.splitlines() if line.startswith("rank "))
    assert lines == [f"rank {r}: {expected}; start every rank with the same settings"
                     for r in (0, 1)], text[-3000:]
