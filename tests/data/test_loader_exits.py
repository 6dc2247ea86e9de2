"""Every way an image-folder run ends leaves no loader worker behind: Ctrl-C (SIGINT) and
SIGTERM in the middle of an epoch (the trainer stops them), and SIGKILL of the trainer (the
kernel kills them: PR_SET_PDEATHSIG).  Errors and normal ends are covered by
test_attacks_image_folder.py and test_image_folder_resume.py."""
import signal
import time

import numpy as np
import pytest
from PIL import Image
from support.gated_run import neonlite
from support.loader_workers import orphan_workers

RUN = """\
epochs: 1
batchsize: 8
rng_seed: 0
dataset: {{type: image_folder, config: {{root: {root}, valid_fraction: 0.2, num_workers: 3}}}}
layers:
  - {{type: Conv, config: {{fshape: [3, 3, 4], activation: {{type: Rectlin}}}}}}
  - {{type: Affine, config: {{nout: auto, activation: {{type: Softmax}}}}}}
cost: CrossEntropyMulti
optimizer: {{type: Adam}}
"""


@pytest.mark.parametrize("sig,status", [(signal.SIGINT, 130), (signal.SIGTERM, 143),
                                        (signal.SIGKILL, -9)])
def test_a_stopped_run_leaves_no_worker(tmp_path, sig, status):
    rng = np.random.default_rng(0)
    for c in range(2):
        (tmp_path / f"c{c}").mkdir()
        for i in range(40):
            Image.fromarray(rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)).save(
                tmp_path / f"c{c}" / f"{i:02d}.png")
    (tmp_path / "run.yaml").write_text(RUN.format(root=tmp_path))
    code, err = neonlite(tmp_path, 3, "train", tmp_path / "run.yaml", send=sig)
    assert code == status, err
    deadline = time.monotonic() + 10
    while orphan_workers() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert orphan_workers() == []
