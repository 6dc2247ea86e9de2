"""An image-folder run with augmentation and loader workers, SIGTERMed in the middle of epoch 2
and resumed, ends with the parameters of an uninterrupted run, bit for bit, with 1, 2 and 3
workers (and the uninterrupted runs agree across worker counts); neither run leaves a loader
worker behind."""
import signal

import numpy as np
import pytest
from PIL import Image
from support.gated_run import neonlite
from support.loader_workers import orphan_workers

from neonlite.serialize import read_checkpoint

RUN = """\
epochs: 2
batchsize: 8
rng_seed: 4
dataset:
  type: image_folder
  config:
    root: {root}
    valid_fraction: 0.2
    num_workers: {workers}
    augment: [{{type: pad_crop, config: {{size: 8, pad: 2}}}}, {{type: flip}}]
layers:
  - {{type: Conv, config: {{fshape: [3, 3, 4], padding: 1, activation: {{type: Rectlin}}}}}}
  - {{type: Dropout, config: {{keep: 0.8}}}}
  - {{type: Affine, config: {{nout: auto, activation: {{type: Softmax}}}}}}
cost: CrossEntropyMulti
optimizer: {{type: Adam, config: {{learning_rate: 0.01}}}}
"""
#: 3 classes x 20 images, 12 held out: 48 training images, 6 batches of 8 per epoch
BATCHES = 6


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("images")
    rng = np.random.default_rng(0)
    for c in range(3):
        (root / f"c{c}").mkdir()
        for i in range(20):
            Image.fromarray(rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)).save(
                root / f"c{c}" / f"{i:02d}.png")
    return root


@pytest.fixture(scope="module")
def whole_runs():
    """The uninterrupted runs' parameters by number of workers."""
    return {}


def params(ckpt):
    return read_checkpoint(ckpt).params


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_sigterm_in_epoch_2_then_resume_equals_the_whole_run(tmp_path, folder, workers,
                                                             whole_runs):
    (tmp_path / "run.yaml").write_text(RUN.format(root=folder, workers=workers))
    run = tmp_path / "run.yaml"
    status, err = neonlite(tmp_path, 0, "train", run, "--save-path", tmp_path / "full.h5")
    assert status == 0, err
    stop = BATCHES + 3
    status, err = neonlite(tmp_path, stop, "train", run, "--save-path", tmp_path / "c.h5",
                           send=signal.SIGTERM)
    assert status == 143, err
    saved = read_checkpoint(tmp_path / "c.h5")
    assert (saved.epoch_index, saved.batch_index) == (1, 3)
    assert orphan_workers() == []
    status, err = neonlite(tmp_path, 0, "train", "--resume", tmp_path / "c.h5")
    assert status == 0, err
    full, resumed = params(tmp_path / "full.h5"), params(tmp_path / "c.h5")
    for name, value in full.items():
        np.testing.assert_array_equal(resumed[name], value, err_msg=name)
    assert read_checkpoint(tmp_path / "c.h5").classes == ("c0", "c1", "c2")
    for other, values in whole_runs.items():
        for name, value in values.items():
            np.testing.assert_array_equal(full[name], value,
                                          err_msg=f"{name}: {workers} workers vs {other}")
    whole_runs[workers] = full
    assert orphan_workers() == []
