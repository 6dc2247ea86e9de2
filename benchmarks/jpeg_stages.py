"""Where one image's time goes in row (b) of ``benchmarks.image_loader`` (JPEG ~500x375 q90 +
random-resized crop 224 + flip + normalise), per stage, on one thread:

    OMP_NUM_THREADS=1 python -m benchmarks.jpeg_stages [--count 64] [--repeats 5]

Stages (milliseconds per image, the median of ``--repeats`` passes over ``--count`` files):
``header`` (open, size from the header), ``decode full`` (Pillow, every pixel) and ``decode
draft`` (``jpeg_draft``: libjpeg's DCT scaling chosen from the drawn crop), ``draw + tables``
(the random boxes and the bilinear tap tables, numpy), then the resize kernel alone into uint8
(``resize``), with the flip fused (``+ flip``) and with the float32 normalisation fused
(``+ normalise``, the pipeline's step), each on full and draft decodes.  ``horizontal`` is the
resize of each box to (box height, 224): the horizontal pass with a one-tap vertical one.
Relative figures only on a shared machine: rerun on an idle one for absolute ones.
"""
import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.image_folders import jpeg_folder
from neonlite.data.augment import Flip, Normalize, Pipeline, RandomResizedCrop
from neonlite.data.augment.draws import sample_uniforms
from neonlite.data.augment.kernels import Batch, Call, augment_module, resample_tables
from neonlite.data.image_decode import Decoder

SIZE = 224


def per_image_ms(run, count, repeats):
    """Median over ``repeats`` of the ms per image of ``run()`` (which handles ``count``)."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append((time.perf_counter() - start) * 1e3 / count)
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


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    root = jpeg_folder(Path(tempfile.mkdtemp(prefix="jpeg-stages-")), args.count + 8)
    paths = sorted(str(p) for p in root.glob("*/*/*.jpg"))[:args.count]
    n = len(paths)
    decoder = Decoder(3)
    crop = RandomResizedCrop(SIZE)
    headers = np.array([decoder.header(p)[:2] + (3,) for p in paths], np.int64)
    u = sample_uniforms(7, np.arange(n), 0, crop.draws)
    boxes = crop.boxes(u, headers[:, 0], headers[:, 1])
    module = augment_module()
    rows = {"header": per_image_ms(lambda: [decoder.header(p) for p in paths], n, args.repeats)}
    full = [decoder.decode(p) for p in paths]
    rows["decode full"] = per_image_ms(lambda: [decoder.decode(p) for p in paths], n,
                                       args.repeats)
    draft = [decoder.decode_box(p, box, (SIZE, SIZE)) for p, box in zip(paths, boxes)]
    rows["decode draft"] = per_image_ms(
        lambda: [decoder.decode_box(p, box, (SIZE, SIZE)) for p, box in zip(paths, boxes)], n,
        args.repeats)
    pipeline = Pipeline([crop, Flip(), Normalize([0.5] * 3, [0.25] * 3)])
    draw = lambda: (pipeline._draw(full, headers, np.arange(n), 7),  # noqa: E731
                    resample_tables(boxes[:, 2], np.full(n, SIZE)),
                    resample_tables(boxes[:, 3], np.full(n, SIZE)))
    rows["draw + tables"] = per_image_ms(draw, n, args.repeats)
    out_hw = np.full((n, 2), SIZE, np.int64)
    u8, f32 = np.empty((n, SIZE, SIZE, 3), np.uint8), np.empty((n, SIZE, SIZE, 3), np.float32)
    no_flip, flips = np.zeros(n, bool), np.ones(n, bool)
    for name, images, bx in (("full", full, boxes),
                             ("draft", [d[0] for d in draft], np.array([d[1] for d in draft]))):
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
    print("| stage | ms / image |\n|---|---|")
    for name, ms in rows.items():
        print(f"| {name} | {ms:.3f} |")


if __name__ == "__main__":
    main()
