"""JPEGs decoded at a reduced scale for a first resize (``jpeg_draft``): the boxes are the ones
a full decode would draw, the scale is the largest of 1/2, 1/4, 1/8 that leaves the box at
least the output's size, off gives the full decode's bits, on stays within a small bound of
them after the resize, and the kernels still equal the numpy reference on the scaled pixels."""
import numpy as np
import pytest
from PIL import Image

from neonlite.data.augment import (CenterCrop, Flip, Normalize, Pipeline,
                                   RandomResizedCrop, Resize)
from neonlite.data.image_batch import BatchMaker
from neonlite.data.image_decode import Decoder, draft_scale, scaled_box
from neonlite.data.image_files import ImageFiles
from neonlite.data.image_folder import ImageFolder
from neonlite.data.iterator import DataError
from support.requires import requires

#: what a scaled decode may change in the resized uint8 output: measured on these photos
#: (noise sigma 15 levels) mean 0.94-1.40, 99th percentile 3-7, largest 6-12 levels
MEAN_BOUND, MAX_BOUND = 2.0, 24


def photos(folder, count=12, seed=0):
    """``count`` JPEGs (quality 90) of 600x800-ish smooth colour fields with noise, written
    under ``folder``; their paths."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(count):
        h, w = 600 + int(rng.integers(-9, 10)), 800 + int(rng.integers(-9, 10))
        yy, xx = np.mgrid[0:h, 0:w] / max(h, w)
        base = np.stack([np.sin(7 * (a * yy + b * xx) + c) for a, b, c in rng.random((3, 3))],
                        axis=-1)
        pixels = np.clip((base * 0.5 + 0.5 + rng.normal(0, 0.06, (h, w, 3))) * 255, 0, 255)
        paths.append(str(folder / f"{i:03d}.jpg"))
        Image.fromarray(pixels.astype(np.uint8)).save(paths[-1], quality=90)
    return paths


def make(paths, ops, draft, kernels=True, key=5, train=True):
    """The batch of ``paths`` through BatchMaker with ``ops``; (out, used, skipped)."""
    pipeline = Pipeline(ops, train=train, use_kernels=kernels)
    files = ImageFiles(paths, [0] * len(paths), ("a",), "test")
    maker = BatchMaker(files, Decoder(3, jpeg_draft=draft), pipeline, skip_corrupt=True)
    kind = np.float32 if pipeline.normalizes else np.uint8
    out = np.empty((len(paths),) + pipeline.out_shape((None, None, 3)), kind)
    used, skipped = maker.make(np.arange(len(paths)), key, out)
    return out, used, skipped


def test_scale_and_box_mapping():
    assert draft_scale((0, 0, 447, 900), (224, 224)) == 1
    assert draft_scale((0, 0, 448, 900), (224, 224)) == 2
    assert draft_scale((3, 5, 1800, 1791), (224, 224)) == 4
    assert draft_scale((0, 0, 2000, 2000), (224, 224)) == 8
    assert list(scaled_box((5, 6, 449, 451), 2, (300, 300))) == [2, 3, 224, 225]
    assert list(scaled_box((597, 0, 3, 8), 4, (150, 200))) == [149, 0, 1, 2]
    for box in np.random.default_rng(1).integers(0, 500, (200, 4)):
        box[2:] = np.maximum(box[2:], 1)
        hw = (-(-(box[0] + box[2]) // 4), -(-(box[1] + box[3]) // 4))
        top, left, height, width = scaled_box(box, 4, hw)
        assert 0 <= top and top + height <= hw[0] and 0 <= left and left + width <= hw[1]
        assert height >= box[2] // 4 and width >= box[3] // 4


def test_a_box_that_allows_it_decodes_at_reduced_scale(tmp_path):
    """Pillow decodes the whole image at the scale, the box mapped into it."""
    path = photos(tmp_path, 1)[0]
    decoder = Decoder(3, jpeg_kernel=False)
    h, w, _ = decoder.header(path)
    pixels, box = decoder.decode_box(path, np.array([10, 20, h - 10, w - 20]), (64, 64))
    assert pixels.shape == (-(-h // 8), -(-w // 8), 3) and box[2] >= 64 and box[3] >= 64
    full, same = Decoder(3, jpeg_draft=False, jpeg_kernel=False).decode_box(
        path, np.array([1, 2, 3, 4]), (1, 1))
    assert full.shape == (h, w, 3) and list(same) == [1, 2, 3, 4]
    small, kept = decoder.decode_box(path, np.array([0, 0, 100, 100]), (64, 64))
    assert small.shape == (h, w, 3) and list(kept) == [0, 0, 100, 100]


@requires("jpeg_kernel")
def test_the_kernel_decodes_only_the_box_at_the_scale(tmp_path):
    path = photos(tmp_path, 1)[0]
    decoder = Decoder(3)
    h, w, _ = decoder.header(path)
    pixels, box = decoder.decode_box(path, np.array([10, 20, h - 10, w - 20]), (64, 64))
    scaled = scaled_box((10, 20, h - 10, w - 20), 8, (-(-h // 8), -(-w // 8)))
    assert pixels.shape[0] == scaled[2] and scaled[3] <= pixels.shape[1] <= -(-w // 8)
    assert box[0] == 0 and list(box[2:]) == list(scaled[2:])
    one, same = Decoder(3, jpeg_draft=False).decode_box(path, np.array([1, 2, 3, 4]), (1, 1))
    assert one.shape[0] == 3 and same[0] == 0 and list(same[2:]) == [3, 4]
    assert np.array_equal(one[:, same[1]:same[1] + 4], decoder.decode(path)[1:4, 2:6])


@pytest.mark.parametrize("ops", [[RandomResizedCrop(56), Flip()], [Resize(70), CenterCrop(64)]],
                         ids=["random resized crop + flip", "resize + centre crop"])
def test_off_gives_the_full_decode_bits_on_stays_within_the_bound(tmp_path, ops):
    paths = photos(tmp_path)
    full = [Decoder(3).decode(p) for p in paths]
    for train in (True, False):
        pipeline = Pipeline(ops, train=train)
        want = np.empty((len(paths),) + pipeline.out_shape((None, None, 3)), np.uint8)
        pipeline.apply(full, np.arange(len(paths)), 5, want)
        off = make(paths, ops, draft=False, train=train)[0]
        on = make(paths, ops, draft=True, train=train)[0]
        assert np.array_equal(off, want)
        diff = np.abs(on.astype(np.int16) - off.astype(np.int16))
        assert diff.mean() <= MEAN_BOUND and diff.max() <= MAX_BOUND, \
            (diff.mean(), diff.max())
        assert not np.array_equal(on, off), "no image was decoded at a reduced scale"


def test_the_reference_runs_on_the_same_scaled_pixels(tmp_path):
    paths = photos(tmp_path, 6)
    ops = [RandomResizedCrop(40, scale=(0.5, 1.0)), Flip(), Normalize(0.5, 0.25)]
    fast, ref = (make(paths, ops, draft=True, kernels=k)[0] for k in (True, False))
    assert fast.dtype == np.float32 and np.array_equal(fast, ref)


def test_a_corrupt_jpeg_is_replaced_as_without_draft(tmp_path):
    paths = photos(tmp_path, 6)
    whole = open(paths[2], "rb").read()
    open(paths[2], "wb").write(whole[:len(whole) // 3])
    open(paths[4], "wb").write(b"not a jpeg at all")
    ops = [RandomResizedCrop(48), Flip()]
    out_on, used_on, skipped_on = make(paths, ops, draft=True)
    out_off, used_off, skipped_off = make(paths, ops, draft=False)
    assert skipped_on == skipped_off == 2 and list(used_on) == list(used_off) == [0, 1, 3, 3,
                                                                                   5, 5]
    good = [0, 1, 3, 5]
    diff = np.abs(out_on[good].astype(np.int16) - out_off[good].astype(np.int16))
    assert diff.mean() <= MEAN_BOUND


def test_the_option_must_be_a_boolean(tmp_path):
    for c in ("a", "b"):
        photos(tmp_path / c, 2, seed=len(c))
    with pytest.raises(DataError, match="jpeg_draft must be true or false, got 'yes'"):
        ImageFolder(root=str(tmp_path), jpeg_draft="yes")
