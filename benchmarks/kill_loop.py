"""The kill loop (issue 16): SIGKILL a ``neonlite train --serialize 1`` run of a ~100 MB model
at a random moment inside one of its checkpoint saves (a random delay after the save's
temporary file appeared, up to half the length of the same run's previous save, and only
while that temporary still exists; otherwise the next save is tried), 20 times, and check
after each kill that the previous checkpoint is loadable and finite, and at the end that no
temporary file is left once a later run has saved.

    python -m benchmarks.kill_loop [--kills 20] [--folder DIR] [--seed 0]

Prints one line per kill and a summary; exits 1 if any check failed.  Each run resumes from
the checkpoint the previous one left (``--resume``), so every kill lands on a run that is
replacing a good checkpoint with a newer one.
"""
import argparse
import glob
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

RUN = """\
backend: cpu
epochs: 100000
batchsize: 16
rng_seed: 0
eval_freq: 0
dataset: {type: shapes, config: {n: 64, size: 8, classes: 4, seed: 0}}
layers:
  - {type: Affine, config: {nout: 4096, activation: {type: Rectlin}}}
  - {type: Affine, config: {nout: 4096, activation: {type: Rectlin}}}
  - {type: Affine, config: {nout: 2048, activation: {type: Rectlin}}}
  - {type: Affine, config: {nout: 4, activation: {type: Softmax}}}
cost: {type: GeneralizedCost, config: {costfunc: {type: CrossEntropyMulti}}}
optimizer: {type: GradientDescentMomentum, config: {learning_rate: 0.001}}
"""


def temporaries(ckpt):
    return sorted(glob.glob(str(ckpt.parent / f".{ckpt.name}.*")))


def check(ckpt):
    """(loadable, finite, epoch) of checkpoint ``ckpt``."""
    from neonlite.serialize import CheckpointError, read_checkpoint
    try:
        saved = read_checkpoint(ckpt)
    except CheckpointError as err:
        print(f"  NOT LOADABLE: {err}")
        return False, False, None
    finite = all(np.isfinite(v).all() for v in saved.params.values())
    return True, finite, saved.epoch_index


def start(config, ckpt, resume):
    argv = [sys.executable, "-m", "neonlite.cli", "train", str(config), "-q", "--max-batches",
            "1", "--save-path", str(ckpt), "--serialize", "1"]
    if resume:
        argv += ["--resume", str(ckpt)]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def wait_for_save(ckpt, proc, timeout=120.0):
    """Seconds until ``ckpt`` changes (a save finished) or a temporary appears."""
    before = ckpt.stat().st_mtime_ns if ckpt.exists() else None
    begin = time.monotonic()
    while time.monotonic() - begin < timeout and proc.poll() is None:
        now = ckpt.stat().st_mtime_ns if ckpt.exists() else None
        if now != before:
            return time.monotonic() - begin
        time.sleep(0.005)
    raise RuntimeError(f"no save within {timeout} s: {proc.stderr.read().decode()[-2000:]}")


def wait_for_temporary(ckpt, proc, timeout=120.0):
    """Return once a save of ``ckpt`` has begun (its temporary file exists)."""
    begin = time.monotonic()
    while time.monotonic() - begin < timeout and proc.poll() is None:
        if temporaries(ckpt):
            return
        time.sleep(0.001)
    raise RuntimeError(f"no save began within {timeout} s")


def save_seconds(ckpt, proc):
    """Seconds one save of ``ckpt`` takes (temporary appears -> file replaced)."""
    wait_for_temporary(ckpt, proc)
    begin = time.monotonic()
    wait_for_save(ckpt, proc)
    return time.monotonic() - begin


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--folder")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    folder = Path(args.folder or tempfile.mkdtemp(prefix="neonlite-kill-loop-"))
    folder.mkdir(parents=True, exist_ok=True)
    config, ckpt = folder / "run.yaml", folder / "c.h5"
    config.write_text(RUN)
    kernel_dirs = set(glob.glob(os.path.join(tempfile.gettempdir(), "neonlite-kernel-*")))

    proc = start(config, ckpt, resume=False)
    wait_for_save(ckpt, proc)
    saving = save_seconds(ckpt, proc)
    proc.kill()
    proc.wait()
    size = ckpt.stat().st_size / 1e6
    print(f"checkpoint {size:.0f} MB (parameters + momentum); one save takes {saving:.2f} s")
    bad, mid_save, left_after_kill = 0, 0, 0
    for i in range(args.kills):
        proc = start(config, ckpt, resume=True)
        saving = save_seconds(ckpt, proc)
        while True:
            wait_for_temporary(ckpt, proc)
            time.sleep(rng.uniform(0.0, saving / 2))
            if temporaries(ckpt):
                break
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        temps = temporaries(ckpt)
        mid_save += bool(temps)
        left_after_kill += len(temps)
        loadable, finite, epoch = check(ckpt)
        bad += not (loadable and finite)
        print(f"kill {i + 1:2d} ({saving:.2f} s save): temporaries left by the kill {len(temps)}, "
              f"checkpoint epoch "
              f"{epoch} loadable {loadable} finite {finite}")
    proc = start(config, ckpt, resume=True)
    wait_for_save(ckpt, proc)
    proc.send_signal(signal.SIGTERM)
    proc.wait()
    left = temporaries(ckpt)
    new_kernel_dirs = set(glob.glob(os.path.join(tempfile.gettempdir(),
                                                 "neonlite-kernel-*"))) - kernel_dirs
    failures = bad + bool(left) + bool(new_kernel_dirs)
    print(f"summary: {args.kills} kills, {mid_save} landed during a save (a temporary was "
          f"left: {left_after_kill} files); checkpoint loadable and finite after "
          f"{args.kills - bad}/{args.kills} "
          f"kills; temporaries after the next run's save: {len(left)}; new kernel scratch "
          f"folders: {len(new_kernel_dirs)}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
