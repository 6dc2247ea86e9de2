"""Every writer goes through neonlite.atomic.atomic_write: a fresh unpredictable temporary
name (a symlink planted at any name the writer might choose is never written through), fsync,
rename; stale temporaries of killed processes are removed by the next write; the kernel
build's scratch folders likewise."""
import os
import subprocess
import sys
import tempfile

import numpy as np
import pytest

import neonlite
from neonlite import Model
from neonlite.atomic import atomic_write, scratch_folder
from neonlite.data import ArrayIterator
from neonlite.data.idx import read_idx, write_idx
from neonlite.layers import Affine, GeneralizedCost
from neonlite.optimizers import GradientDescentMomentum
from neonlite.training_log import TrainingLog
from neonlite.transforms import CrossEntropyMulti, Softmax


def dead_pid():
    """The pid of a process that has ended."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def plant_symlinks(folder, name, victim, pids):
    """Symlinks to ``victim`` at every temporary name an older writer would choose
    (``.NAME.tmp<pid>``) for each pid in ``pids``, and at a few ``.NAME.*`` names."""
    links = [folder / f".{name}.tmp{pid}" for pid in pids]
    links += [folder / f".{name}.{tag}.tmp{pids[0]}" for tag in ("a", "tmp", "part")]
    for link in links:
        link.symlink_to(victim)
    return links


def trained():
    neonlite.gen_backend("cpu", batch_size=8, rng_seed=0)
    rng = np.random.default_rng(0)
    data = ArrayIterator(rng.normal(size=(16, 4)), rng.integers(0, 2, 16), nclass=2)
    model = Model([Affine(2, activation=Softmax())])
    model.fit(data, GradientDescentMomentum(0.1), 1, GeneralizedCost(CrossEntropyMulti()))
    return model


def _plot(path):
    from neonlite.cli import main
    pytest.importorskip("matplotlib", reason="neonlite plot needs matplotlib")
    log = path.with_name("log.h5")
    _log(log)
    assert main(["plot", str(log), "-o", str(path)]) == 0


WRITERS = {
    "checkpoint": lambda path: trained().save(path),
    "plot": _plot,
    "training log": lambda path: _log(path),
    "idx": lambda path: write_idx(str(path), np.arange(6, dtype=np.uint8).reshape(2, 3)),
    "bytes": lambda path: _bytes(path),
}


def _log(path):
    log = TrainingLog(path)
    log.model = trained()
    log.on_train_begin(None, 1)
    log.on_train_end()


def _bytes(path):
    with atomic_write(path) as out:
        out.write(b"payload")


@pytest.mark.parametrize("writer", list(WRITERS))
def test_a_planted_symlink_is_never_written_through(tmp_path, writer):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    target = tmp_path / "out.png"
    links = plant_symlinks(tmp_path, target.name, victim, [os.getpid(), os.getpid() + 1])
    WRITERS[writer](target)
    assert victim.read_text() == "precious"
    assert target.is_file() and not target.is_symlink()
    for link in links:
        assert not link.exists() or os.readlink(link) == str(victim)


def test_a_symlink_at_the_target_is_replaced_not_followed(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    target = tmp_path / "out.bin"
    target.symlink_to(victim)
    _bytes(target)
    assert victim.read_text() == "precious"
    assert not target.is_symlink() and target.read_bytes() == b"payload"


def test_stale_temporaries_of_dead_processes_are_removed(tmp_path):
    target = tmp_path / "c.h5"
    pid = dead_pid()
    stale = [tmp_path / f".c.h5.tmp{pid}", tmp_path / f".c.h5.k2j4h_x1.tmp{pid}"]
    live = tmp_path / f".c.h5.abcdefgh.tmp{os.getppid()}"
    other = tmp_path / f".d.h5.tmp{pid}"
    for path in stale + [live, other]:
        path.write_bytes(b"partial")
    _bytes(target)
    assert [p.exists() for p in stale] == [False, False]
    assert live.exists() and other.exists()


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "out.bin"
    target.write_bytes(b"old")
    with pytest.raises(RuntimeError):
        with atomic_write(target) as out:
            out.write(b"new, half")
            raise RuntimeError("disk full")
    assert target.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.bin"]


def test_written_files_get_the_usual_permissions(tmp_path):
    mask = os.umask(0o022)
    try:
        _bytes(tmp_path / "out.bin")
    finally:
        os.umask(mask)
    assert (tmp_path / "out.bin").stat().st_mode & 0o777 == 0o644


def test_idx_round_trip_through_the_helper(tmp_path):
    array = np.arange(24, dtype=np.uint8).reshape(2, 3, 4)
    for name in ("a.idx", "a.idx.gz"):
        write_idx(str(tmp_path / name), array)
        assert np.array_equal(read_idx(str(tmp_path / name)), array)


def test_stale_kernel_scratch_folders_are_removed():
    parent = tempfile.gettempdir()
    pid = dead_pid()
    stale = tempfile.mkdtemp(prefix=f"neonlite-kernel-{pid}-", dir=parent)
    with open(os.path.join(stale, "half.so"), "wb") as f:
        f.write(b"x")
    with scratch_folder("neonlite-kernel-") as folder:
        assert folder.is_dir() and folder.name.startswith(f"neonlite-kernel-{os.getpid()}-")
        assert oct(folder.stat().st_mode & 0o777) == oct(0o700)
        assert not os.path.exists(stale)
    assert not folder.exists()
