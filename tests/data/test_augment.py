"""The augmentation pipeline in numpy: its ops' definitions, its per-sample determinism, its
output paths and its errors (``neonlite.data.augment``)."""
import numpy as np
import pytest

from neonlite.data import DataError
from neonlite.data.augment import (CenterCrop, ColorJitter, Flip, Normalize, PadCrop,
                                   Pipeline, RandomResizedCrop, Resize, epoch_key,
                                   pipeline_from_config, sample_uniforms)
from neonlite.data.augment.resample import bilinear_taps, resize_box


def images(n, h, w, c=3, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (n, h, w, c), dtype=np.uint8)


def run(pipeline, x, indices, key=7, dtype=np.uint8):
    shape = pipeline.out_shape(x.shape[1:] if isinstance(x, np.ndarray) else (None, None, 3))
    out = np.empty((len(x),) + shape, dtype)
    return pipeline.apply(x, np.asarray(indices, np.int64), key, out)


CIFAR = [PadCrop(32, pad=4), Flip()]


def test_uniforms_depend_on_key_index_and_op_only():
    u = sample_uniforms(5, np.array([3, 10, 2**40]), 1, 6)
    assert u.shape == (3, 6) and np.all((u >= 0) & (u < 1))
    assert np.array_equal(sample_uniforms(5, [10], 1, 6)[0], u[1])
    assert not np.array_equal(sample_uniforms(5, [10], 2, 6)[0], u[1])
    assert not np.array_equal(sample_uniforms(6, [10], 1, 6)[0], u[1])
    assert np.all(u * 2**24 == np.floor(u * 2**24))


def test_a_sample_is_augmented_the_same_in_any_batch():
    x = images(16, 32, 32)
    pipeline = Pipeline(CIFAR + [ColorJitter(0.4, 0.4, 0.4)])
    whole = run(pipeline, x, np.arange(100, 116))
    order = np.random.default_rng(1).permutation(16)
    shuffled = run(pipeline, x[order], 100 + order)
    assert np.array_equal(shuffled, whole[order])
    alone = run(pipeline, x[5:6], [105])
    assert np.array_equal(alone[0], whole[5])
    assert not np.array_equal(run(pipeline, x, np.arange(100, 116), key=8), whole)


def test_pad_crop_is_a_window_of_the_padded_image():
    x = images(64, 9, 7, c=2)
    op = PadCrop((8, 6), pad=3, fill=17)
    out = run(Pipeline([op]), x, np.arange(64))
    u = sample_uniforms(7, np.arange(64), 0, 2)
    padded = np.pad(x, ((0, 0), (3, 3), (3, 3), (0, 0)), constant_values=17)
    for i in range(64):
        top, left = int(u[i, 0] * (9 + 6 - 8 + 1)), int(u[i, 1] * (7 + 6 - 6 + 1))
        assert np.array_equal(out[i], padded[i, top:top + 8, left:left + 6])
    assert len({(int(u[i, 0] * 8), int(u[i, 1] * 8)) for i in range(64)}) > 20


def test_flip_mirrors_about_half_the_samples():
    x = images(200, 5, 6)
    out = run(Pipeline([Flip()]), x, np.arange(200))
    flipped = np.array([np.array_equal(o, xi[:, ::-1]) for o, xi in zip(out, x)])
    kept = np.array([np.array_equal(o, xi) for o, xi in zip(out, x)])
    assert np.all(flipped | kept) and 70 < flipped.sum() < 130
    assert np.array_equal(run(Pipeline([Flip(p=1.0)]), x, np.arange(200)), x[:, :, ::-1])


def test_evaluation_is_deterministic_and_centred():
    x = images(4, 32, 32)
    assert np.array_equal(run(Pipeline(CIFAR + [ColorJitter(0.5)], train=False), x,
                              [0, 1, 2, 3]), x)
    ev = Pipeline([RandomResizedCrop(16)]).evaluation()
    assert not ev.is_random
    a, b = run(ev, x, [0, 1, 2, 3], key=1), run(ev, x, [9, 8, 7, 6], key=2)
    assert np.array_equal(a, b)


def test_bilinear_taps_sum_to_one_in_fixed_point():
    for length, out in [(500, 224), (37, 224), (224, 224), (3, 1), (1, 5)]:
        first, weights = bilinear_taps([length], out)
        sums = weights[0].sum(axis=1)
        assert np.all(np.abs(sums - 2**22) <= weights.shape[2])
        assert np.all(first >= 0) and np.all(first < length)


def test_resize_of_an_equal_size_box_is_the_crop():
    x = images(1, 20, 30)[0]
    assert np.array_equal(resize_box(x, (2, 3, 10, 12), (10, 12)), x[2:12, 3:15])


@pytest.mark.parametrize("box,size", [((0, 0, 375, 500), (224, 224)), ((10, 40, 97, 61),
                                      (224, 224)), ((3, 5, 31, 17), (8, 9)), ((0, 0, 7, 5),
                                      (13, 3))])
def test_resize_matches_pillow_within_one(box, size):
    image_module = pytest.importorskip("PIL.Image")
    x = images(1, 375, 500, seed=3)[0]
    ours = resize_box(x, box, size)
    top, left, h, w = box
    theirs = np.asarray(image_module.fromarray(x).crop((left, top, left + w, top + h)).resize(
        (size[1], size[0]), image_module.BILINEAR))
    assert np.abs(ours.astype(int) - theirs).max() <= 1


def test_random_resized_crop_boxes_lie_in_the_ranges():
    op = RandomResizedCrop(224, scale=(0.2, 0.9), ratio=(0.5, 2.0))
    n = 500
    u = sample_uniforms(3, np.arange(n), 0, op.draws)
    h = np.full(n, 375)
    w = np.full(n, 500)
    top, left, bh, bw = op.boxes(u, h, w).T
    assert np.all((top >= 0) & (left >= 0) & (top + bh <= 375) & (left + bw <= 500))
    area = bh * bw / (375 * 500)
    assert area.min() > 0.19 and area.max() < 0.91
    assert np.all((bw / bh > 0.49) & (bw / bh < 2.05))


def test_resize_and_centre_crop_shapes():
    assert Pipeline([Resize(256), CenterCrop(224)]).out_shape((375, 500, 3)) == (224, 224, 3)
    assert Resize(256).out_shape((500, 375, 3)) == (341, 256, 3)
    mixed = [images(1, 40, 60)[0], images(1, 80, 50)[0]]
    out = run(Pipeline([Resize(32), CenterCrop(32)]), mixed, [0, 1])
    assert out.shape == (2, 32, 32, 3)


def test_normalize_gives_float_per_channel():
    x = images(3, 4, 5)
    mean, std = [0.1, 0.5, 0.9], [0.2, 0.25, 0.5]
    for dtype in (np.float32, np.float64):
        out = run(Pipeline([Normalize(mean, std)]), x, [0, 1, 2], dtype=dtype)
        want = (x / 255.0 - np.array(mean)) / np.array(std)
        assert out.dtype == dtype and np.allclose(out, want, atol=1e-5)


def test_colour_jitter_keeps_grey_images_grey_under_saturation():
    x = np.repeat(images(8, 6, 6, c=1), 3, axis=3)
    out = run(Pipeline([ColorJitter(saturation=0.8)]), x, np.arange(8))
    assert np.array_equal(out, x)


def test_epoch_key_comes_from_the_host_rng():
    a, b = np.random.default_rng(4), np.random.default_rng(4)
    assert epoch_key(a) == epoch_key(b) and epoch_key(a) != epoch_key(np.random.default_rng(5))


def test_yaml_form_round_trips():
    desc = [{"type": "pad_crop", "config": {"size": 32, "pad": 4}}, "flip",
            {"type": "normalize", "config": {"mean": [0.5, 0.5, 0.5], "std": 0.25}}]
    pipeline = pipeline_from_config(desc)
    again = pipeline_from_config(pipeline.describe())
    x = images(4, 32, 32)
    assert np.array_equal(run(pipeline, x, range(4), dtype=np.float32),
                          run(again, x, range(4), dtype=np.float32))


@pytest.mark.parametrize("desc,shape,message", [
    ([{"type": "pad_crop", "config": {"size": 41, "pad": 4}}], (32, 32, 3),
     "augment[0]: PadCrop: crop height size=41 is larger than the padded image (32 + 2 * pad=4"),
    ([{"type": "random_resized_crop", "config": {"size": 8, "scale": [0.5, 0.1]}}], None,
     "augment[0].config.scale: RandomResizedCrop: scale must be a [lo, hi] pair"),
    ([{"type": "random_resized_crop", "config": {"size": 8, "ratio": [0, 1]}}], None,
     "augment[0].config.ratio:"),
    ([{"type": "normalize", "config": {"mean": [0.1, 0.2]}}], (8, 8, 3),
     "augment[0]: Normalize: mean has 2 values but the images have 3 channels"),
    ([{"type": "normalize", "config": {"std": [1, 0, 1]}}], None,
     "augment[0].config.std: Normalize: std must be"),
    (["normalize", "flip"], None, "augment[0]: Normalize must be the last op"),
    ([{"type": "flp"}], None, "augment[0].type: unknown augmentation op 'flp'; did you mean "
                              "'flip'?"),
    ([{"type": "flip", "config": {"q": 1}}], None, "augment[0].config.q: unknown option"),
    ([{"type": "center_crop"}], None, "augment[0].config: missing required option 'size'"),
    ([{"type": "center_crop", "config": {"size": 40}}], (32, 32, 3),
     "augment[0]: CenterCrop: size=[40, 40] is larger than the image"),
    ([{"type": "resize", "config": {"shorter_side": 16}}], (None, None, 3),
     "augment: the images have different sizes"),
    ("flip", None, "augment: expected a list of augmentation ops"),
])
def test_bad_options_are_one_line_naming_the_option(desc, shape, message):
    with pytest.raises(DataError) as err:
        pipeline_from_config(desc).out_shape(shape)
    assert message in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("images_, indices, key, out, message", [
    (np.zeros((2, 8, 8, 3), np.float32), [0, 1], 0, np.zeros((2, 8, 8, 3), np.uint8),
     "expected uint8 images (N, H, W, C)"),
    ([np.zeros((8, 8, 3), np.uint8), np.zeros((8, 8), np.uint8)], [0, 1], 0,
     np.zeros((2, 8, 8, 3), np.uint8), "image 1 of the batch must be a uint8 (H, W, C)"),
    (np.zeros((2, 8, 8, 3), np.uint8), [0], 0, np.zeros((2, 8, 8, 3), np.uint8),
     "indices must be (2,) integers"),
    (np.zeros((2, 8, 8, 3), np.uint8), [0, 1], -1, np.zeros((2, 8, 8, 3), np.uint8),
     "epoch_key must be an integer in [0, 2**64)"),
    (np.zeros((2, 8, 8, 3), np.uint8), [0, 1], 0, np.zeros((2, 8, 8, 3), np.float32),
     "out must be a writeable (2, 8, 8, 3) array of uint8"),
])
def test_bad_batches_are_one_line(images_, indices, key, out, message):
    with pytest.raises(DataError) as err:
        Pipeline([Flip()]).apply(images_, np.asarray(indices), key, out)
    assert message in str(err.value)


def test_a_crop_larger_than_one_sample_of_a_mixed_batch_names_the_sample():
    mixed = [images(1, 40, 40)[0], images(1, 20, 40)[0]]
    with pytest.raises(DataError, match=r"augment\[0\]: CenterCrop: .* of sample 1 \(20x40\)"):
        Pipeline([CenterCrop(32)]).apply(mixed, np.array([0, 1]), 0,
                                         np.zeros((2, 32, 32, 3), np.uint8))
