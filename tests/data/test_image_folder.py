"""neonlite.data.ImageFolder: class folders and manifests listed into arrays, held-out splits,
the input shape from the images, and a batch stream that is the same bits whatever the number
of loader workers, resumable part-way through an epoch and sharded like ArrayIterator."""
import numpy as np
import pytest
from PIL import Image

from neonlite.backends import gen_backend
from neonlite.data.image_folder import ImageFolder, images_for_prediction
from neonlite.data.image_workers import worker_threads
from neonlite.data.iterator import DataError
from neonlite.data.position import epoch_batches

CROP = [{"type": "pad_crop", "config": {"size": 8, "pad": 2}}, {"type": "flip"}]


def write_images(folder, per_class=(5, 4, 6), size=(8, 8), mode="RGB", seed=0, fmt="png"):
    """Class folders c0, c1, ... of random images under ``folder``; returns the pixels by
    path."""
    rng = np.random.default_rng(seed)
    pixels = {}
    for c, count in enumerate(per_class):
        (folder / f"c{c}").mkdir(parents=True, exist_ok=True)
        for i in range(count):
            shape = size + ((3,) if mode == "RGB" else ())
            image = rng.integers(0, 256, shape, dtype=np.uint8)
            path = folder / f"c{c}" / f"{i:03d}.{fmt}"
            Image.fromarray(image).save(path)
            pixels[str(path)] = image
    return pixels


def epoch(data, skip=0, state=None):
    if state is not None:
        data.be.rng.bit_generator.state = state
    return [(b, x.get().copy(), t.get().copy(), data.valid)
            for b, (x, t) in epoch_batches(data, skip)]


def test_train_and_valid_folders_set_classes_shape_and_pixels(tmp_path):
    gen_backend("cpu", batch_size=4, rng_seed=0)
    pixels = write_images(tmp_path / "train")
    pixels.update(write_images(tmp_path / "valid", per_class=(2, 1, 1), seed=1))
    data = ImageFolder(root=str(tmp_path), num_workers=0)
    assert data.classes == ("c0", "c1", "c2") and data.nclass == 3
    assert data.shape == (8, 8, 3)
    assert len(data.files["train"]) == 15 and len(data.files["valid"]) == 4
    batches = epoch(data.valid_iter)
    xs = np.concatenate([x for _, x, _, _ in batches])[:4]
    ts = np.concatenate([t for _, _, t, _ in batches])[:4]
    files = data.files["valid"]
    for i in range(4):
        np.testing.assert_allclose(xs[i], pixels[files.path(i)] / 255.0, rtol=1e-6)
    assert ts.tolist() == [0, 0, 1, 2]


def test_grayscale_images_give_one_channel_and_a_manifest_reads_names(tmp_path):
    gen_backend("cpu", batch_size=4, rng_seed=0)
    write_images(tmp_path / "img", mode="L")
    lines = ["# path,label"] + [f"img/c{c}/{i:03d}.png,{'cat dog emu'.split()[c]}"
                                for c, n in enumerate((5, 4, 6)) for i in range(n)]
    (tmp_path / "list.csv").write_text("\n".join(lines) + "\n")
    tsv = [line.replace(",", "\t") for line in lines[1:4]]
    (tmp_path / "held.tsv").write_text("\n".join(tsv) + "\n")
    data = ImageFolder(manifest=str(tmp_path / "list.csv"), valid=str(tmp_path / "held.tsv"),
                       num_workers=0)
    assert data.classes == ("cat", "dog", "emu") and data.shape == (8, 8, 1)
    assert data.files["valid"].labels.tolist() == [0, 0, 0]


def test_valid_fraction_holds_out_each_class_the_same_way_every_time(tmp_path):
    gen_backend("cpu", batch_size=4, rng_seed=0)
    write_images(tmp_path / "all", per_class=(10, 10, 10))
    one = ImageFolder(root=str(tmp_path / "all"), valid_fraction=0.2, num_workers=0)
    two = ImageFolder(root=str(tmp_path / "all"), valid_fraction=0.2, num_workers=0)
    held = one.files["valid"]
    assert np.bincount(held.labels).tolist() == [2, 2, 2]
    assert [held.path(i) for i in range(6)] == [two.files["valid"].path(i) for i in range(6)]
    train = {one.files["train"].path(i) for i in range(24)}
    assert not train & {held.path(i) for i in range(6)}


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_the_batch_stream_is_the_same_bits_with_any_number_of_workers(tmp_path, workers):
    gen_backend("cpu", batch_size=4, rng_seed=7)
    write_images(tmp_path / "train")
    state = np.random.default_rng(11).bit_generator.state
    here = ImageFolder(root=str(tmp_path / "train"), augment=CROP, num_workers=0)
    there = ImageFolder(root=str(tmp_path / "train"), augment=CROP, num_workers=workers)
    try:
        expected, got = epoch(here.train_iter, 0, state), epoch(there.train_iter, 0, state)
        again = epoch(there.train_iter, 0, state)
    finally:
        there.close()
    assert len(expected) == 4
    for (b, x, t, v), (b2, x2, t2, v2), (_, x3, _, _) in zip(expected, got, again):
        assert b == b2 and v == v2 and np.array_equal(t, t2)
        assert np.array_equal(x, x2) and np.array_equal(x, x3)
    assert expected[-1][3] == 3, "15 images in batches of 4: the last has 3 real rows"


def test_batches_from_is_the_tail_of_the_epoch_and_decodes_nothing_before_it(tmp_path):
    gen_backend("cpu", batch_size=4, rng_seed=7)
    write_images(tmp_path / "train")
    data = ImageFolder(root=str(tmp_path / "train"), augment=CROP, num_workers=0)
    it = data.train_iter
    state = it.be.rng.bit_generator.state
    whole = epoch(it, 0, state)
    after_whole = it.be.rng.bit_generator.state
    decoded = []
    make = it.maker.make
    it.maker.make = lambda indices, key, out: (decoded.append(len(indices)),
                                               make(indices, key, out))[1]
    tail = epoch(it, 3, state)
    assert [b for b, *_ in tail] == [3] and len(decoded) == 1
    assert np.array_equal(tail[0][1], whole[3][1]) and np.array_equal(tail[0][2], whole[3][2])
    assert it.be.rng.bit_generator.state == after_whole


def test_shards_split_every_global_batch(tmp_path):
    gen_backend("cpu", batch_size=2, rng_seed=7)
    write_images(tmp_path / "train", per_class=(4, 4))
    state = np.random.default_rng(3).bit_generator.state
    parts = []
    for rank in range(2):
        data = ImageFolder(root=str(tmp_path / "train"), num_workers=0)
        parts.append(epoch(data.train_iter.shard(rank, 2), 0, state))
    gen_backend("cpu", batch_size=4, rng_seed=7)
    whole = epoch(ImageFolder(root=str(tmp_path / "train"), num_workers=0).train_iter, 0,
                  state)
    for b in range(2):
        joined = np.concatenate([parts[0][b][1], parts[1][b][1]])
        assert np.array_equal(joined, whole[b][1])


@pytest.mark.parametrize("workers", [0, 2])
def test_skip_corrupt_replaces_and_counts_a_truncated_image(tmp_path, workers):
    gen_backend("cpu", batch_size=4, rng_seed=0)
    write_images(tmp_path / "train", per_class=(4, 4))
    bad = tmp_path / "train" / "c1" / "001.png"
    bad.write_bytes(bad.read_bytes()[:60])
    data = ImageFolder(root=str(tmp_path / "train"), num_workers=0, shuffle=False)
    with pytest.raises(DataError, match="001.png: corrupt or truncated image"):
        epoch(data.train_iter)
    data = ImageFolder(root=str(tmp_path / "train"), num_workers=workers, shuffle=False,
                       skip_corrupt=True)
    batches = epoch(data.train_iter)
    data.close()
    assert data.train_iter.skipped == 1
    x, t = batches[1][1], batches[1][2]
    assert np.array_equal(x[1], x[2]) and t[1] == t[2] == 1


def test_mixed_sizes_need_a_size_and_size_resizes(tmp_path):
    gen_backend("cpu", batch_size=4, rng_seed=0)
    write_images(tmp_path / "train", per_class=(3, 3))
    Image.fromarray(np.zeros((10, 12, 3), np.uint8)).save(tmp_path / "train" / "c1" / "z.png")
    with pytest.raises(DataError, match=r"z\.png: the image is 10x12 but .* is 8x8; images "
                                        r"of different sizes need size"):
        ImageFolder(root=str(tmp_path / "train"), num_workers=0)
    data = ImageFolder(root=str(tmp_path / "train"), size=[6, 6], num_workers=0)
    assert data.shape == (6, 6, 3) and len(epoch(data.train_iter)) == 2


def test_prediction_images_are_read_as_the_evaluation_set(tmp_path):
    gen_backend("cpu", batch_size=4, rng_seed=0)
    write_images(tmp_path / "train")
    data = ImageFolder(root=str(tmp_path / "train"), augment=CROP, num_workers=0,
                       shuffle=False)
    valid = data.train_pipeline.evaluation()
    assert not valid.is_random
    paths = [data.files["train"].path(i) for i in range(4)]
    got = images_for_prediction({"augment": CROP}, data.shape, paths)
    first = epoch(_eval_iter(data))[0][1]
    np.testing.assert_allclose(got / 255.0, first, rtol=1e-6)


def _eval_iter(data):
    data.files["valid"] = data.files["train"]
    return data.valid_iter


def test_a_train_folder_can_be_split_instead_of_a_valid_folder(tmp_path):
    gen_backend("cpu", batch_size=4, rng_seed=0)
    write_images(tmp_path / "train", per_class=(5, 5))
    write_images(tmp_path / "valid", per_class=(1, 1), seed=1)
    data = ImageFolder(root=str(tmp_path), valid_fraction=0.2, num_workers=0)
    assert data.classes == ("c0", "c1")
    assert len(data.files["train"]) == 8 and len(data.files["valid"]) == 2
    assert all("/train/" in data.files["valid"].path(i) for i in range(2))


def test_workers_share_the_cores_between_their_kernel_threads():
    assert worker_threads(2, 2) == 1 and worker_threads(3, 2) == 1
    assert worker_threads(2, 16) == 8 and worker_threads(1, 4) == 4 and worker_threads(4, 1) == 1
