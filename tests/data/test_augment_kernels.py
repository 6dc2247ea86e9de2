"""The C augmentation kernels (``kernels/cpu/augment.c``, the uint8 variant ``augment_u8``)
against the ops' numpy references: the same bits for every op, fused flip and normalise, odd
sizes, mixed-size batches, uint8 and float outputs, and any thread count."""
import numpy as np
import pytest
from support.isolated import python_argv, run_isolated
from support.requires import need, requires

from neonlite.backends.cpu.threads import set_cpu_threads, usable_cores
from neonlite.data.augment import (CenterCrop, ColorJitter, Flip, Normalize, PadCrop,
                                   Pipeline, RandomResizedCrop, Resize)
from neonlite.data.augment.kernels import augment_module
from neonlite.kernels import cpu_features, specs

pytestmark = requires("compiler")

NORM = Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])
PIPELINES = {
    "pad crop": [PadCrop(32, pad=4)],
    "pad crop + flip": [PadCrop(32, pad=4, fill=9), Flip()],
    "pad crop + flip + normalise": [PadCrop((31, 29), pad=3), Flip(), NORM],
    "flip alone": [Flip(0.7)],
    "flip + flip": [PadCrop(30, pad=1), Flip(), Flip()],
    "random resized crop": [RandomResizedCrop(24)],
    "random resized crop + flip + normalise": [RandomResizedCrop((23, 17), scale=(0.05, 1.0),
                                                                 ratio=(0.3, 3.0)), Flip(),
                                               NORM],
    "resize + centre crop": [Resize(19), CenterCrop(17)],
    "jitter": [ColorJitter(0.5, 0.5, 0.5)],
    "crop + jitter + normalise": [PadCrop(32, pad=4), Flip(), ColorJitter(0.4, 0.4, 0.4),
                                  NORM],
    "normalise alone": [NORM],
    "nothing": [],
}


def _batch(n=24, h=33, w=35, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (n, h, w, 3), dtype=np.uint8)


def _both(ops, images, train=True, dtype=None, key=11):
    results = []
    for kernels in (False, True):
        pipeline = Pipeline(ops, train=train, use_kernels=kernels)
        shape = images.shape[1:] if isinstance(images, np.ndarray) else (None, None, 3)
        kind = dtype or (np.float32 if pipeline.normalizes else np.uint8)
        out = np.empty((len(images),) + pipeline.out_shape(shape), kind)
        results.append(pipeline.apply(images, np.arange(100, 100 + len(images)), key, out))
    return results


def test_the_kernels_are_the_uint8_variant_kind():
    assert augment_module() is not None, "the pipeline would compare numpy with numpy"
    assert specs.cpu_variant("augment", np.uint8).name == "augment_u8"
    assert specs.find("augment_u8").define("DTYPE") == "uint8_t"
    assert "augment" not in specs.CPU_SOURCES
    with pytest.raises(KeyError, match="compiled for uint8"):
        specs.cpu_variant("augment", np.float32)


@pytest.mark.parametrize("name", list(PIPELINES))
@pytest.mark.parametrize("train", [True, False])
def test_kernels_equal_the_reference_bit_for_bit(name, train):
    ops = PIPELINES[name]
    if name == "pad crop + flip + normalise" or "random resized crop +" in name:
        images = _batch(17, 31, 29)
    else:
        images = _batch()
    ref, fast = _both(ops, images, train)
    assert ref.dtype == fast.dtype and np.array_equal(ref, fast)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_float_outputs_equal_the_reference(dtype):
    ref, fast = _both([RandomResizedCrop(16), Flip(), NORM], _batch(), dtype=dtype)
    assert fast.dtype == dtype and np.array_equal(ref, fast)


@pytest.mark.parametrize("size", [(1, 1), (2, 3), (7, 5), (64, 3)])
def test_odd_sizes(size):
    images = _batch(9, 13, 11, seed=2)
    ops = [RandomResizedCrop(size, scale=(0.01, 1.0)), Flip(), ColorJitter(0.3, 0.3, 0.3)]
    ref, fast = _both(ops, images)
    assert np.array_equal(ref, fast)


VECTOR_CASES = {
    # the benchmark's row (b): boxes of a 500x375 photo to 224, flipped, normalised
    "photo to 224": ((375, 500), [RandomResizedCrop(224), Flip(), NORM]),
    # whole-image boxes: the last row and the right edge (no byte after the box), odd widths
    "whole image, odd sizes": ((97, 131), [Resize(45), Flip()]),
    "near-whole boxes": ((61, 83), [RandomResizedCrop((37, 53), scale=(0.9, 1.0)), Flip()]),
    # many taps (a shrink of over 6x) and upscaling (fewer source pixels than outputs)
    "shrink 6x": ((250, 301), [RandomResizedCrop((33, 41), scale=(0.8, 1.0)), NORM]),
    "upscale": ((13, 11), [RandomResizedCrop((67, 71)), Flip()]),
}


#: NEONLITE_CPU_FEATURES_OFF values that make aug_resize run each of its paths: AVX-512
#: (VBMI windows), AVX2, scalar
SIMD_LEVELS = {2: "", 1: "avx512vbmi", 0: "avx2"}


def _simd_level(level, monkeypatch):
    """Run aug_resize at ``level`` (skipped where this CPU or build has no such path)."""
    need(*{1: ("resize_avx2",), 2: ("resize_avx512",)}.get(level, ()))
    monkeypatch.setenv(cpu_features.FEATURES_OFF, SIMD_LEVELS[level])
    assert min(cpu_features.byte_vector_level(), augment_module().lib.aug_simd_built()) == level


@pytest.mark.parametrize("level", sorted(SIMD_LEVELS))
@pytest.mark.parametrize("name", list(VECTOR_CASES))
def test_vector_resize_equals_the_reference_at_odd_sizes(name, level, monkeypatch):
    """Every path of the resize (AVX-512 windows of 5 pixels, AVX2 pairs, scalar; 16 bytes
    per vertical step, masked or scalar tails): every remainder of the row lengths and boxes
    that end at the image's last byte, uint8 and float outputs."""
    _simd_level(level, monkeypatch)
    (h, w), ops = VECTOR_CASES[name]
    for train in (True, False):
        ref, fast = _both(ops, _batch(5, h, w, seed=h), train)
        assert np.array_equal(ref, fast), f"{name} (train={train})"


@pytest.mark.parametrize("level", sorted(SIMD_LEVELS))
def test_every_resize_path_equals_the_reference_on_many_boxes(level, monkeypatch):
    """Random boxes of every shape (shrinks up to 12x, whose windows do not fit 64 bytes and
    fall back, and upscales), 1, 3 and 4 channels, flipped or not, uint8 and float."""
    _simd_level(level, monkeypatch)
    rng = np.random.default_rng(level)
    for channels in (1, 3, 4):
        for out in ((224, 224), (31, 7), (5, 64)):
            images = rng.integers(0, 256, (6, 97, 389, channels), dtype=np.uint8)
            for ops in ([RandomResizedCrop(out, scale=(0.002, 1.0), ratio=(0.2, 5.0)), Flip()],
                        [RandomResizedCrop(out, scale=(0.5, 1.0)), Flip(),
                         Normalize([0.3] * channels, [0.2] * channels)]):
                ref, fast = _both(ops, images)
                assert np.array_equal(ref, fast), (channels, out, ops)


def test_the_cpu_runs_the_widest_resize_path_it_has():
    """Where the CPU flags list AVX-512 VBMI the build holds that path (-march=native)."""
    if cpu_features.byte_vector_level() == 2:
        assert augment_module().lib.aug_simd_built() == 2


#: images whose last byte is the last readable one (an inaccessible page follows), resized
#: with boxes that end there: a read past the box would be a segmentation fault
AT_PAGE_END = """
import ctypes, mmap, sys
import numpy as np
from neonlite.data.augment import Flip, Pipeline, RandomResizedCrop, Resize
page = mmap.PAGESIZE
for (h, w), ops in (((37, 41), [Resize(90)]), ((29, 31), [Resize(12), Flip(1.0)]),
                    ((21, 19), [RandomResizedCrop((64, 80), scale=(1.0, 1.0), ratio=(0.9, 0.9)),
                                Flip(1.0)])):
    size = h * w * 3
    pages = -(-size // page)
    buffer = mmap.mmap(-1, (pages + 1) * page)
    image = np.frombuffer(buffer, np.uint8, size, pages * page - size).reshape(1, h, w, 3)
    image[...] = np.random.default_rng(h).integers(0, 256, image.shape, dtype=np.uint8)
    base = ctypes.addressof(ctypes.c_char.from_buffer(buffer))
    assert ctypes.CDLL(None).mprotect(ctypes.c_void_p(base + pages * page), page, 0) == 0
    fast = Pipeline(ops).apply(image, [0], 1, np.empty((1,) + Pipeline(ops).out_shape(
        image.shape[1:]), np.uint8))
    ref = Pipeline(ops, use_kernels=False).apply(image, [0], 1, np.empty_like(fast))
    assert np.array_equal(fast, ref), (h, w)
print("ok")
"""


@pytest.mark.parametrize("level", sorted(SIMD_LEVELS))
def test_the_resize_reads_nothing_past_the_image(level, monkeypatch):
    """Boxes at the image's last byte, upscaled (several outputs on its last pixel, the
    tables mirrored too) and shrunk: the AVX2 pass reads one byte past a tap's pixel, the
    AVX-512 one loads masked windows, and neither reads past the image."""
    _simd_level(level, monkeypatch)
    done = run_isolated(python_argv(AT_PAGE_END), memory_mib=2048, seconds=120)
    assert done.outcome == "success" and "ok" in done.stdout, (done.outcome, done.stderr[-2000:])


def test_mixed_sizes_and_one_channel():
    rng = np.random.default_rng(5)
    mixed = [rng.integers(0, 256, (int(h), int(w), 3), dtype=np.uint8)
             for h, w in rng.integers(20, 90, (12, 2))]
    for ops in ([Resize(24), CenterCrop(20), Flip(), NORM],
                [RandomResizedCrop(21), Flip(), ColorJitter(0.2, 0.6, 0.9)]):
        ref, fast = _both(ops, mixed)
        assert np.array_equal(ref, fast)
    grey = _batch()[..., :1].copy()
    ref, fast = _both([PadCrop(30, pad=2), Flip(), ColorJitter(0.5, 0.5), Normalize(0.5, 0.2)],
                      grey)
    assert np.array_equal(ref, fast)


def test_non_contiguous_output_is_written():
    pipeline = Pipeline([PadCrop(32, pad=4), Flip()])
    images = _batch(6, 32, 32)
    full = np.zeros((6, 32, 32, 6), np.uint8)
    out = full[..., ::2]
    pipeline.apply(images, np.arange(6), 3, out)
    want = Pipeline([PadCrop(32, pad=4), Flip()], use_kernels=False).apply(
        images, np.arange(6), 3, np.empty((6, 32, 32, 3), np.uint8))
    assert np.array_equal(out, want)


def test_results_do_not_depend_on_the_thread_count():
    ops = [RandomResizedCrop(40), Flip(), ColorJitter(0.4, 0.4, 0.4), NORM]
    images = _batch(32, 60, 50)
    results = []
    try:
        for threads in sorted({1, 2, max(usable_cores(), 3)}):
            set_cpu_threads(threads)
            results.append(_both(ops, images)[1])
    finally:
        set_cpu_threads(usable_cores())
    assert all(np.array_equal(results[0], r) for r in results[1:])


def test_jitter_rounds_halves_to_even_as_the_reference():
    """Factors that land exactly on .5 (brightness 0.5 of odd levels, contrast 0.5 about a
    half-integer mean): the kernel rounds half to even, as numpy's ``rint``."""
    from neonlite.data.augment.kernels import run_steps
    op = ColorJitter(0.5, 0.5)
    images = np.arange(2 * 4 * 4 * 3, dtype=np.uint8).reshape(2, 4, 4, 3) * 5
    shapes = np.tile(np.array([4, 4, 3], np.int64), (2, 1))
    params = {"factors": np.array([[0.5, 1.0, 1.0], [1.0, 0.5, 1.0]], np.float32)}
    want = np.stack([op.reference(images[i], params, i) for i in range(2)])
    out = run_steps(augment_module(), [(op, params)], images, shapes,
                    np.empty_like(images), None)
    assert np.array_equal(out, want)
    assert out[0, 0, 0, 1] == 2 and out[0, 0, 1, 0] == 8  # 2.5 -> 2, 7.5 -> 8
