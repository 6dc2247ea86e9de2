"""Memory of an image-folder run stays flat: the resident memory of the trainer and its two
loader workers together after epoch 5 is at most 1.1 times that after epoch 1 (workers get the
file list as arrays, so nothing in them is copied on write as epochs go by)."""
import json
import subprocess
import sys

import numpy as np
from PIL import Image

RUN = """
import json, os, sys
from pathlib import Path
from neonlite import Model, gen_backend
from neonlite.callbacks import Callbacks, FunctionCallback
from neonlite.data.image_folder import ImageFolder
from neonlite.layers import Affine, Conv, GeneralizedCost, Pooling
from neonlite.optimizers import GradientDescentMomentum
from neonlite.transforms import CrossEntropyMulti, Rectlin, Softmax

def rss(pid):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0

def workers():
    found = []
    for entry in Path("/proc").iterdir():
        try:
            line = (entry / "cmdline").read_bytes().replace(b"\\0", b" ").decode()
        except OSError:
            continue
        if "worker_main(" in line and line.rstrip().endswith(f", {os.getpid()})"):
            found.append(int(entry.name))
    return found

gen_backend("cpu", batch_size=32, rng_seed=0)
data = ImageFolder(root=sys.argv[1], num_workers=2, valid_fraction=0.1,
                   augment=[{"type": "pad_crop", "config": {"size": 16, "pad": 2}}, "flip"])
model = Model([Conv((3, 3, 8), padding=1, activation=Rectlin()), Pooling(2, op="max"),
               Affine(nout=data.nclass, activation=Softmax())])
after = []
record = lambda epoch: after.append((rss(os.getpid()), [rss(w) for w in workers()]))
callbacks = Callbacks(model, progress=False)
callbacks.add(FunctionCallback(on_epoch_end=record))
model.fit(data.train_iter, GradientDescentMomentum(0.01), 5, GeneralizedCost(CrossEntropyMulti()),
          callbacks)
print(json.dumps(after))
"""


def test_resident_memory_after_epoch_5_is_within_10_percent_of_epoch_1(tmp_path):
    rng = np.random.default_rng(0)
    for c in range(4):
        (tmp_path / f"c{c}").mkdir()
        for i in range(250):
            Image.fromarray(rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)).save(
                tmp_path / f"c{c}" / f"{i:04d}.png")
    done = subprocess.run([sys.executable, "-c", RUN, str(tmp_path)], capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    after = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(after) == 5 and all(len(workers) == 2 for _, workers in after)
    totals = [main + sum(workers) for main, workers in after]
    (tmp_path / "rss.json").write_text(json.dumps({"after_epoch": after, "totals": totals}))
    assert totals[4] <= 1.1 * totals[0], totals
    for w in range(2):
        assert after[4][1][w] <= 1.1 * after[0][1][w], [a[1] for a in after]
