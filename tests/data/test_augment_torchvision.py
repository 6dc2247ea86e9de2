"""The bilinear resize of the augmentation (Pillow's filter, ``resample.py``) against
torchvision's ``resized_crop(..., antialias=True)`` on uint8 tensors: within 1 unit on the same
boxes.  torchvision runs in the Python the ``torchvision`` need finds (a test-only
dependency)."""
import json
import subprocess

import numpy as np
from support.requires import requires, torchvision_python

from neonlite.data.augment.resample import resize_box

BOXES = [((0, 0, 375, 500), (224, 224)), ((10, 40, 97, 61), (224, 224)),
         ((3, 5, 31, 17), (8, 9)), ((100, 200, 250, 290), (224, 224)), ((0, 0, 7, 5), (13, 3))]

RESIZE = r"""
import json, sys
import numpy as np, torch
from torchvision.transforms.v2 import functional as F
image = torch.from_numpy(np.load(sys.argv[1])).permute(2, 0, 1).contiguous()
out = {}
for i, ((top, left, h, w), size) in enumerate(json.loads(sys.argv[2])):
    out[str(i)] = F.resized_crop(image, top, left, h, w, list(size),
                                 antialias=True).permute(1, 2, 0).numpy()
np.savez(sys.argv[3], **out)
"""


@requires("torchvision")
def test_resize_matches_torchvision_within_one(tmp_path):
    image = np.random.default_rng(7).integers(0, 256, (375, 500, 3), dtype=np.uint8)
    np.save(tmp_path / "image.npy", image)
    done = subprocess.run([torchvision_python(), "-c", RESIZE, str(tmp_path / "image.npy"),
                           json.dumps(BOXES), str(tmp_path / "theirs.npz")],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    theirs = np.load(tmp_path / "theirs.npz")
    for i, (box, size) in enumerate(BOXES):
        ours = resize_box(image, box, size)
        diff = np.abs(ours.astype(int) - theirs[str(i)].astype(int))
        assert diff.max() <= 1, (box, size, diff.max())
