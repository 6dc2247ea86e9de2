"""Data-parallel training under mpirun: 1 process x batch B equals N ranks x batch B/N (LeNet
in f32 and f64, one epoch of every example YAML), checkpoints move between rank counts, and
a rank that dies or hangs ends the job with its rank named.

Each test launches ``mpirun --oversubscribe -np N`` in a subprocess with a timeout; they skip
only where mpirun or mpi4py is missing (``.ci/run`` installs both).
"""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import pytest

from support.harness import CHECKOUT
from support.requires import requires

from neonlite.serialize import read_checkpoint

ROOT = CHECKOUT
HELPERS = ROOT / "tests" / "distributed"
LENET = HELPERS / "lenet.yaml"



pytestmark = requires("mpi")

ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1", PYTHONUNBUFFERED="1")


def _command(nranks, args):
    if nranks == 1:
        return [sys.executable, *args]
    return ["mpirun", "--oversubscribe", "-np", str(nranks), sys.executable, *args]


def run(nranks, args, timeout=120, env=None):
    """Run ``python args...`` on ``nranks`` ranks (1: a plain process); returns the result."""
    done = subprocess.run(_command(nranks, args), cwd=ROOT, env=env or ENV, timeout=timeout,
                          capture_output=True, text=True)
    return done


def train_cli(nranks, out, *flags):
    done = run(nranks, ["-m", "neonlite.cli", "train", str(LENET), "-q", "--save-path",
                        str(out), *flags])
    assert done.returncode == 0, done.stderr[-3000:]
    return read_checkpoint(out)


def relative_difference(a, b):
    """||a - b|| / ||a|| over every parameter and buffer of two checkpoints (float64)."""
    assert list(a.params) == list(b.params)
    x = np.concatenate([a.params[k].ravel().astype(np.float64) for k in a.params])
    y = np.concatenate([b.params[k].ravel().astype(np.float64) for k in a.params])
    return float(np.linalg.norm(x - y) / np.linalg.norm(x))


# ---- equivalence ---------------------------------------------------------------------------------
@pytest.mark.parametrize("datatype,tolerance", [("f32", 1e-5), ("f64", 1e-9)])
def test_two_ranks_of_64_equal_one_process_of_128(tmp_path, datatype, tolerance):
    flags = ["-z", "128", "--sync-bn", "--max-batches", "10", "-d", datatype]
    one = train_cli(1, tmp_path / "one.h5", *flags)
    two = train_cli(2, tmp_path / "two.h5", *flags)
    assert one.step_index == two.step_index == 10
    moved = relative_difference(read_initial(tmp_path, datatype), one)
    assert moved > 100 * tolerance, "the 10 steps must move the parameters"
    assert relative_difference(one, two) <= tolerance
    if datatype == "f64":
        for key in one.params:
            a, b = one.params[key], two.params[key]
            assert np.abs(a - b).max() <= tolerance * max(np.abs(a).max(), 1e-3), key


def read_initial(tmp_path, datatype):
    """The checkpoint of the LeNet run before any step (same seed, so the same weights)."""
    import neonlite
    from neonlite.cli.session import load_data
    from neonlite.config.run import DATATYPES, RunConfig
    out = tmp_path / f"init_{datatype}.h5"
    run = RunConfig.from_file(LENET)
    neonlite.gen_backend("cpu", batch_size=128, rng_seed=run.settings["rng_seed"],
                         datatype=DATATYPES[datatype])
    _, train, _ = load_data(run.settings, None, valid=False)
    model = run.build_model()
    model.initialize(train, run.build_cost())
    model.save(out)
    return read_checkpoint(out)


EXAMPLES = {
    "mnist_mlp": "mnist28",
    "mnist_cnn": "mnist28",
    "shapes_cnn": {"type": "shapes", "config": {"n": 16, "nvalid": 8, "size": 32}},
    "cifar10_allcnn": {"type": "shapes", "config": {"n": 16, "nvalid": 8, "size": 32,
                                                    "nclass": 10}},
    "cifar10_resnet": {"type": "shapes", "config": {"n": 16, "nvalid": 8, "size": 32,
                                                    "nclass": 10}},
    "char_transformer": {"type": "text", "config": {"seq_len": 32, "nbatches": 2}},
}


def _mnist_like(tmp_path):
    """A tiny MNIST-shaped HDF5 data set: 16 train / 8 valid uint8 (28, 28, 1) images."""
    rng = np.random.default_rng(0)
    paths = []
    for name, n in (("train", 16), ("valid", 8)):
        path = tmp_path / f"mnist_{name}.h5"
        with h5py.File(path, "w") as f:
            f["x"] = rng.integers(0, 256, size=(n, 28, 28, 1), dtype=np.uint8)
            f["y"] = rng.integers(0, 10, size=n)
        paths.append(str(path))
    return {"type": "hdf5", "config": {"train": paths[0], "valid": paths[1], "nclass": 10}}


@pytest.mark.parametrize("example", sorted(EXAMPLES))
def test_one_epoch_of_every_example_is_the_same_on_two_ranks(tmp_path, example):
    """N ranks against one process, one epoch, with synchronised batch norm: parameters within
    1e-5 in f32 and 1e-9 in f64.  The f32 runs are also checked against the f64 one: the
    N-rank run must be no farther from the exact result than 1e-5 either."""
    dataset = EXAMPLES[example]
    if dataset == "mnist28":
        dataset = _mnist_like(tmp_path)
    nranks = 4 if example == "shapes_cnn" else 2
    yaml_path = ROOT / "examples" / f"{example}.yaml"
    results = {}
    for datatype in ("f64", "f32"):
        for n in (1, nranks):
            out = tmp_path / f"{example}_{n}_{datatype}.h5"
            done = run(n, [str(HELPERS / "run_example.py"), str(yaml_path), json.dumps(dataset),
                           str(out), "8", datatype], timeout=180)
            assert done.returncode == 0, done.stderr[-3000:]
            results[n, datatype] = read_checkpoint(out)
    steps = {result.step_index for result in results.values()}
    assert len(steps) == 1 and steps.pop() >= 2
    assert relative_difference(results[1, "f64"], results[nranks, "f64"]) <= 1e-9
    assert relative_difference(results[1, "f32"], results[nranks, "f32"]) <= 1e-5
    assert relative_difference(results[1, "f64"], results[nranks, "f32"]) <= 1e-5


# ---- validation ----------------------------------------------------------------------------------
def test_sharded_validation_gives_the_one_process_metric(tmp_path):
    """Each rank evaluates its shard of 200 validation images (the last global batch partly
    padding) and the sums are added over the ranks: the logged metric equals one process's."""
    from neonlite.training_log import read_log
    yaml_path = tmp_path / "lenet_valid.yaml"
    yaml_path.write_text(LENET.read_text().replace("{n: 1280,", "{n: 1280, nvalid: 200,"))
    metrics = []
    for n in (1, 2):
        log = tmp_path / f"log_{n}.h5"
        done = run(n, ["-m", "neonlite.cli", "train", str(yaml_path), "-q", "-z", "128",
                       "--sync-bn", "--max-batches", "2", "--eval-freq", "1", "-d", "f64",
                       "-o", str(log)])
        assert done.returncode == 0, done.stderr[-3000:]
        metrics.append(read_log(log)["epoch"]["metric"])
    assert metrics[0].shape == (1,) and np.isfinite(metrics[0]).all()
    np.testing.assert_allclose(metrics[1], metrics[0], rtol=1e-12)


# ---- progress and cores ------------------------------------------------------------------------
def test_progress_thread_completes_an_allreduce_while_the_rank_computes():
    """With no MPI call on the main thread for 1.5 s after the start, one MPI_Test finds the
    6.6 MB allreduce done: the thread moved it (without it, Open MPI leaves it waiting)."""
    done = run(2, [str(HELPERS / "progress_rank.py"), "thread", "1.5"])
    assert done.returncode == 0, done.stderr[-3000:]
    line = done.stdout.strip().splitlines()[-1]
    assert "complete=True" in line and "correct=True" in line, line
    assert int(line.split("polls=")[1]) > 10, line


def _cores_of_ranks(nranks):
    """[(rank, cores kept or None, threads or None, affinity after)] of ``nranks`` ranks that
    mpirun --oversubscribe started on the same cores."""
    script = ("import os, json; from neonlite.distributed import DataParallel, detect_world; "
              "w = detect_world(); dp = DataParallel(w); "
              "print(json.dumps([w.rank, dp.cores, dp.threads, "
              "sorted(os.sched_getaffinity(0))]), flush=True)")
    env = {k: v for k, v in ENV.items() if k != "OMP_NUM_THREADS"}
    done = run(nranks, ["-c", script], env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return sorted(json.loads(line) for line in done.stdout.strip().splitlines())


def test_oversubscribed_ranks_get_their_own_cores():
    ncores = len(os.sched_getaffinity(0))
    rows = _cores_of_ranks(2)
    assert [row[0] for row in rows] == [0, 1]
    if ncores < 2:
        assert all(row[1] is None and row[2] == 1 for row in rows)
        return
    share = ncores // 2
    assert all(len(row[1]) == share and row[2] == share and row[3] == row[1] for row in rows)
    assert not set(rows[0][1]) & set(rows[1][1])


def test_ranks_outnumbering_the_cores_run_one_thread_each():
    ncores = len(os.sched_getaffinity(0))
    nranks = ncores + 1
    if nranks > 8:
        pytest.skip(f"{ncores} cores: {nranks} ranks would be too many for a test")
    rows = _cores_of_ranks(nranks)
    assert len(rows) == nranks
    assert all(row[1] is None and row[2] == 1 and len(row[3]) == ncores for row in rows)


# ---- checkpoints between rank counts ---------------------------------------------------------------
def test_checkpoint_from_two_ranks_resumes_on_four(tmp_path):
    flags = ["-z", "64", "--sync-bn", "--max-batches", "3", "-d", "f64"]
    straight = train_cli(1, tmp_path / "straight.h5", *flags, "-e", "2")
    train_cli(2, tmp_path / "first.h5", *flags, "-e", "1")
    resumed = train_cli(4, tmp_path / "resumed.h5", *flags, "-e", "2", "--resume",
                        str(tmp_path / "first.h5"))
    assert resumed.epoch_index == straight.epoch_index == 2
    assert resumed.step_index == straight.step_index == 6
    assert relative_difference(straight, resumed) <= 1e-9


# ---- faults ----------------------------------------------------------------------------------------
def _rank_pid(mpirun_pid, rank):
    """The pid of the process of ``rank`` started by mpirun ``mpirun_pid`` (None: not yet)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if f"OMPI_COMM_WORLD_RANK={rank}".encode() in environ and \
                int(stat.rsplit(")", 1)[1].split()[1]) == mpirun_pid:
            return int(entry.name)
    return None


def test_killed_rank_ends_the_job_and_the_checkpoint_stays_loadable(tmp_path):
    ckpt = tmp_path / "run.h5"
    env = dict(ENV, NEONLITE_COLLECTIVE_TIMEOUT="30")
    proc = subprocess.Popen(_command(2, ["-m", "neonlite.cli", "train", str(LENET), "-q",
                                         "-z", "64", "-e", "1000", "--max-batches", "2",
                                         "--serialize", "1", "--save-path", str(ckpt)]),
                            cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 90
        while not ckpt.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
        assert ckpt.exists(), "no checkpoint was written within 90 s"
        victim = _rank_pid(proc.pid, 1)
        assert victim is not None, "rank 1's process was not found"
        os.kill(victim, signal.SIGKILL)
        killed = time.monotonic()
        output, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0
    assert time.monotonic() - killed < 30 + 15
    assert "rank 1" in output, output[-2000:]
    model_ckpt = read_checkpoint(ckpt)
    assert model_ckpt.epoch_index >= 1 and np.isfinite(
        np.concatenate([v.ravel() for v in model_ckpt.params.values()])).all()


def test_hung_rank_times_out_and_is_named(tmp_path):
    env = dict(ENV, NEONLITE_COLLECTIVE_TIMEOUT="4")
    begin = time.monotonic()
    done = run(2, [str(HELPERS / "hang_rank.py"), str(LENET)], timeout=90, env=env)
    assert done.returncode != 0
    assert time.monotonic() - begin < 60
    message = done.stderr + done.stdout
    assert "rank 0/2" in message and "collective timeout of 4 s" in message, message[-2000:]
    assert "rank 1 did not answer" in message, message[-2000:]


def test_rank_stopped_before_mpi_init_times_out_and_is_named():
    env = dict(ENV, NEONLITE_COLLECTIVE_TIMEOUT="4")
    begin = time.monotonic()
    done = run(2, [str(HELPERS / "stop_before_init.py"), str(LENET)], timeout=90, env=env)
    assert done.returncode != 0
    assert time.monotonic() - begin < 60
    message = done.stderr + done.stdout
    assert "rank 0/2: MPI start-up" in message, message[-2000:]
    assert "collective timeout of 4 s: rank 1 did not arrive" in message, message[-2000:]
