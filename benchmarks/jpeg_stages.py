"""Where one image's time goes in row (b) of ``benchmarks.image_loader`` (JPEG ~500x375 q90 +
random-resized crop 224 + flip + normalise), per stage, on one thread:

    OMP_NUM_THREADS=1 python -m benchmarks.jpeg_stages [--count 64] [--repeats 5]

Stages (milliseconds per image, the median of ``--repeats`` passes over ``--count`` files):
``header (Pillow)`` (open, size from Pillow's header parse), ``open (kernel)`` (what the
loader does: the file read once, the header parsed by libjpeg), ``decode full (Pillow)``
(every pixel, Pillow's libjpeg-turbo), ``decode draft (Pillow)`` (``jpeg_draft``: libjpeg's
DCT scaling chosen from the drawn crop, the whole image), ``decode full (kernel)`` (the
region-of-interest kernel of ``kernels/cpu/jpeg/``, every pixel) and ``decode box (kernel)``
(the pipeline's path: only the drawn box, at the draft scale where one applies, into rows
libjpeg writes in place), ``draw`` (the random boxes, numpy), then the resize kernel alone
(it makes its tap tables) into uint8 (``resize``), with the flip fused (``+ flip``) and with
the float32 normalisation fused (``+ normalise``, the pipeline's step), each on full decodes
and on the kernel's boxes.  ``horizontal`` is the resize of each box to (box height, 224):
the horizontal pass with a one-tap vertical one.  ``[AVX-512]``, ``[AVX2]``, ``[scalar]``:
the pipeline's resize with its vector paths limited so (through
``NEONLITE_CPU_FEATURES_OFF``), alternating.  Times are this process's CPU time
(``time.process_time``, which a loaded machine disturbs less than the wall clock; run it
with ``OMP_NUM_THREADS=1``).  Relative figures only on a shared machine: rerun on an idle
one for absolute ones.
"""
import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.image_folders import jpeg_folder
from neonlite.data.augment import Flip, Normalize, Pipeline, RandomResizedCrop
from neonlite.data.augment.draws import sample_uniforms
from neonlite.data.augment.kernels import Batch, Call, augment_module
from neonlite.kernels.cpu_features import FEATURES_OFF, byte_vector_level
from neonlite.data.image_decode import Decoder

SIZE = 224


def per_image_ms(run, count, repeats):
    """Median over ``repeats`` of the ms per image of ``run()`` (which handles ``count``)."""
    times = []
    for _ in range(repeats):
        start = time.process_time()
        run()
        times.append((time.process_time() - start) * 1e3 / count)
    return statistics.median(times)


def resize_call(module, images, boxes, out_hw, flip, out):
    """One ``aug_resize`` call on the batch ``images`` (list) of ``boxes`` (N, 4)."""
    ffi = module.ffi
    shapes = np.array([image.shape for image in images], np.int64)
    scale, shift = (np.full(3, 1 / 64.0), np.full(3, -1.0))
    stores = (ffi.from_buffer("double[]", scale), ffi.from_buffer("double[]", shift))
    kind = 1 if getattr(out, "dtype", None) == np.float32 else 0
    call = Call(ffi, Batch(ffi, images, shapes), out, out_hw, flip, kind, stores)
    return lambda: call.resize(module.lib, boxes)


def at_level(level, run):
    """``run`` with the resize's vector paths limited to ``level`` (``aug_resize``'s
    ``simd``: the AVX-512 and AVX2 paths turned off through the CPU flags)."""
    off = {2: "", 1: "avx512vbmi", 0: "avx2"}[level]

    def limited():
        before = os.environ.get(FEATURES_OFF)
        os.environ[FEATURES_OFF] = off
        try:
            return run()
        finally:
            os.environ.pop(FEATURES_OFF) if before is None else \
                os.environ.__setitem__(FEATURES_OFF, before)
    return limited


def alternating_ms(runs, count, repeats):
    """{name: median ms per image} of ``runs`` ({name: run()}, each handling ``count``
    images), timed in turn ``repeats`` times so load changes hit them alike."""
    times = {name: [] for name in runs}
    for _ in range(repeats):
        for name, run in runs.items():
            start = time.process_time()
            run()
            times[name].append((time.process_time() - start) * 1e3 / count)
    return {name: statistics.median(t) for name, t in times.items()}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    root = jpeg_folder(Path(tempfile.mkdtemp(prefix="jpeg-stages-")), args.count + 8)
    paths = sorted(str(p) for p in root.glob("*/*/*.jpg"))[:args.count]
    n = len(paths)
    decoder, pillow = Decoder(3), Decoder(3, jpeg_kernel=False)
    if decoder.jpeg is None:
        parser.error("the region-of-interest JPEG kernel is not built here (neonlite doctor "
                     "says why)")
    crop = RandomResizedCrop(SIZE)
    headers = np.array([decoder.header(p)[:2] + (3,) for p in paths], np.int64)
    u = sample_uniforms(7, np.arange(n), 0, crop.draws)
    boxes = crop.boxes(u, headers[:, 0], headers[:, 1])
    module = augment_module()
    rows = {"header (Pillow)": per_image_ms(lambda: [decoder.header(p) for p in paths], n,
                                            args.repeats),
            "open (kernel)": per_image_ms(lambda: [decoder.open(p).close() for p in paths], n,
                                          args.repeats)}
    full = [pillow.decode(p) for p in paths]
    rows.update(alternating_ms({
        "decode full (Pillow)": lambda: [pillow.decode(p) for p in paths],
        "decode draft (Pillow)": lambda: [pillow.decode_box(p, box, (SIZE, SIZE))
                                          for p, box in zip(paths, boxes)],
        "decode full (kernel)": lambda: [decoder.decode(p) for p in paths],
        "decode box (kernel)": lambda: [decoder.decode_box(p, box, (SIZE, SIZE))
                                        for p, box in zip(paths, boxes)]}, n, args.repeats))
    cut = [decoder.decode_box(p, box, (SIZE, SIZE)) for p, box in zip(paths, boxes)]
    pipeline = Pipeline([crop, Flip(), Normalize([0.5] * 3, [0.25] * 3)])
    rows["draw"] = per_image_ms(lambda: pipeline._draw(full, headers, np.arange(n), 7), n,
                                args.repeats)
    out_hw = np.full((n, 2), SIZE, np.int64)
    u8, f32 = np.empty((n, SIZE, SIZE, 3), np.uint8), np.empty((n, SIZE, SIZE, 3), np.float32)
    no_flip, flips = np.zeros(n, bool), np.ones(n, bool)
    for name, images, bx in (("full", full, boxes),
                             ("box", [d[0] for d in cut], np.array([d[1] for d in cut]))):
        rows[f"resize ({name})"] = per_image_ms(
            resize_call(module, images, bx, out_hw, no_flip, u8), n, args.repeats)
        rows[f"resize + flip ({name})"] = per_image_ms(
            resize_call(module, images, bx, out_hw, flips, u8), n, args.repeats)
        rows[f"resize + flip + normalise ({name})"] = per_image_ms(
            resize_call(module, images, bx, out_hw, flips, f32), n, args.repeats)
        tall = [np.empty((int(b[2]), SIZE, 3), np.uint8) for b in bx]
        rows[f"horizontal ({name})"] = per_image_ms(
            resize_call(module, images, bx, np.stack([bx[:, 2], np.full(n, SIZE)], 1),
                        no_flip, tall), n, args.repeats)
    paths = {level: name for level, name in ((2, "AVX-512"), (1, "AVX2"), (0, "scalar"))
             if level <= min(byte_vector_level(), module.lib.aug_simd_built())}
    box_images, box_boxes = [d[0] for d in cut], np.array([d[1] for d in cut])
    rows.update(alternating_ms({
        f"resize + flip + normalise (box) [{name}]": at_level(level, resize_call(
            module, box_images, box_boxes, out_hw, flips, f32)) for level, name in paths.items()},
        n, args.repeats))
    print("| stage | ms / image |\n|---|---|")
    for name, ms in rows.items():
        print(f"| {name} | {ms:.3f} |")


if __name__ == "__main__":
    main()
