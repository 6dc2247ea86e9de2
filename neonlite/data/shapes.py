"""Shapes: a procedurally generated image set for offline training and tests.

Each image is one shape on a plain background: a circle, square, triangle or cross, filled or
outlined, at a random size, position, rotation and colour, with Gaussian pixel noise.  Filled
and outlined versions are distinct classes, so the full set has 8 classes; telling them apart
needs local edge features at any position, which a linear model cannot build (it stays near
chance) and a small CNN learns in a few epochs.
"""
import numpy as np

from .dataset import ImageDataset

CLASSES = ("circle", "square", "triangle", "cross",
           "circle_outline", "square_outline", "triangle_outline", "cross_outline")
KINDS = ("circle", "square", "triangle", "cross")
_BLOCK = 1024
_TRI_ANGLES = np.pi / 2 + np.array([0.0, 2 * np.pi / 3, 4 * np.pi / 3])
_TRI = tuple(zip(np.cos(_TRI_ANGLES).astype(np.float32), np.sin(_TRI_ANGLES).astype(np.float32)))


class Shapes(ImageDataset):
    """``n`` training and ``nvalid`` validation images of shapes, deterministic from ``seed``.

    Arguments:
        n (int): training images.
        size (int): image height and width in pixels (>= 8).
        classes (int or sequence of str): the first ``classes`` names of :data:`CLASSES`
            (4: the filled shapes only; 8: all), or a list of names from it; label i is the
            i-th class.  Classes are balanced.
        seed (int): the same seed gives the same images (train and validation come from
            independent streams of it).
        nvalid (int or None): validation images (default ``n // 5``, at least 1).
        noise (float): standard deviation of the Gaussian pixel noise, in 0-255 units.
        scale (pair): shape half-extent as a fraction of ``size``, drawn uniformly from it.
        nclass (int or None): width of the one-hot targets (default: the number of classes;
            larger fits a model with more outputs, e.g. 10 for a CIFAR-10 network).

    X: uint8 (N, size, size, 3) NHWC (kept on the host, scaled by 1/255 on the way in); y:
    class indices (one-hot (N, nclass) in ``train_iter`` / ``valid_iter``).  Generating
    10,000 32x32 images takes about a second.
    """

    name = "shapes"

    def __init__(self, n=10000, size=32, classes=8, seed=0, nvalid=None, noise=12.0,
                 scale=(0.2, 0.4), nclass=None, shuffle=True, reconstruct=False, augment=None):
        super().__init__(shuffle, reconstruct, augment)
        if not isinstance(n, (int, np.integer)) or n < 1:
            raise ValueError(f"Shapes: n must be a positive integer, got {n!r}")
        if not isinstance(size, (int, np.integer)) or size < 8:
            raise ValueError(f"Shapes: size must be an integer >= 8, got {size!r}")
        self.class_names = _class_names(classes)
        self.nclass = len(self.class_names) if nclass is None else nclass
        if not isinstance(self.nclass, (int, np.integer)) or \
                self.nclass < len(self.class_names):
            raise ValueError(f"Shapes: nclass (the width of the one-hot targets) must be an "
                             f"integer >= the {len(self.class_names)} classes, got {nclass!r}")
        self.n, self.size, self.seed, self.noise = int(n), int(size), seed, float(noise)
        self.nvalid = max(1, self.n // 5) if nvalid is None else int(nvalid)
        if self.nvalid < 1:
            raise ValueError(f"Shapes: nvalid must be a positive integer, got {nvalid!r}")
        try:
            lo, hi = (float(v) for v in scale)
        except (TypeError, ValueError):
            lo = hi = float("nan")
        if not 0 < lo <= hi <= 0.5:
            raise ValueError(f"Shapes: scale must be (lo, hi) with 0 < lo <= hi <= 0.5, got "
                             f"{scale!r}")
        if not isinstance(seed, (int, np.integer)) or seed < 0:
            raise ValueError(f"Shapes: seed must be a non-negative integer, got {seed!r}")
        self.scale = (lo, hi)
        self.image_shape = (self.size, self.size, 3)

    def _load(self):
        return tuple(make_shapes(count, self.size, self.class_names,
                                 np.random.default_rng([self.seed, stream]), self.noise,
                                 self.scale)
                     for stream, count in ((0, self.n), (1, self.nvalid)))


def _class_names(classes):
    if isinstance(classes, (int, np.integer)):
        if not 2 <= classes <= len(CLASSES):
            raise ValueError(f"Shapes: classes must be 2..{len(CLASSES)} or a list of names "
                             f"from {CLASSES}, got {classes}")
        return CLASSES[:classes]
    names = tuple(classes)
    unknown = [c for c in names if c not in CLASSES]
    if unknown or len(set(names)) != len(names) or len(names) < 2:
        raise ValueError(f"Shapes: classes must be at least 2 distinct names from {CLASSES}, "
                         f"got {names}")
    return names


def make_shapes(n, size, class_names, rng, noise=12.0, scale=(0.2, 0.4)):
    """``n`` images (uint8 (n, size, size, 3), NHWC) and labels (int64 (n,), indices into
    ``class_names``), drawn from the numpy Generator ``rng``; vectorized over images."""
    labels = rng.permutation(np.arange(n) % len(class_names))
    half = rng.uniform(*scale, size=n) * size
    margin = 0.8 * half
    cx = margin + rng.random(n) * (size - 2 * margin)
    cy = margin + rng.random(n) * (size - 2 * margin)
    theta = rng.uniform(0.0, 2 * np.pi, size=n)
    bg = rng.uniform(0, 255, size=(n, 3)).astype(np.float32)
    fg = np.mod(bg + rng.uniform(64, 192, size=(n, 3)).astype(np.float32), 256.0)
    noise_seed = rng.integers(2 ** 63)
    names = np.array(class_names)[labels]
    kind = np.array([KINDS.index(c.split("_")[0]) for c in class_names])[labels]
    outline = np.char.endswith(names, "_outline")
    X = np.empty((n, size, size, 3), dtype=np.uint8)
    noise_rng = np.random.default_rng(noise_seed)
    grid = np.arange(size, dtype=np.float32) + 0.5
    for lo in range(0, n, _BLOCK):
        sl = slice(lo, min(n, lo + _BLOCK))
        alpha = _coverage(grid, cx[sl], cy[sl], theta[sl], half[sl], kind[sl], outline[sl])
        img = noise_rng.standard_normal((alpha.shape + (3,)), dtype=np.float32)
        img *= noise
        img += bg[sl, None, None, :]
        img += alpha[..., None] * (fg[sl] - bg[sl])[:, None, None, :]
        np.clip(np.rint(img, out=img), 0, 255, out=img)
        X[sl] = img
    return X, labels.astype(np.int64)


def _coverage(grid, cx, cy, theta, half, kind, outline):
    """Anti-aliased coverage (m, size, size) in [0, 1] of each image's shape."""
    cx, cy, half = (a.astype(np.float32)[:, None, None] for a in (cx, cy, half))
    dx, dy = grid[None, None, :] - cx, grid[None, :, None] - cy
    c, s = (f(theta).astype(np.float32)[:, None, None] for f in (np.cos, np.sin))
    u, v = c * dx + s * dy, c * dy - s * dx
    dist = np.empty(u.shape, dtype=np.float32)
    for k, sdf in enumerate((_circle, _square, _triangle, _cross)):
        sel = kind == k
        if sel.any():
            dist[sel] = sdf(u[sel], v[sel], half[sel])
    width = np.maximum(np.float32(1.2), np.float32(0.18) * half)
    filled = 0.5 - dist
    ring = 0.5 + width / 2 - np.abs(dist)
    return np.clip(np.where(outline[:, None, None], ring, filled), 0.0, 1.0, dtype=np.float32)


def _circle(u, v, h):
    return np.sqrt(u * u + v * v) - h


def _square(u, v, h):
    return np.maximum(np.abs(u), np.abs(v)) - 0.8 * h


def _triangle(u, v, h):
    edges = [u * cos + v * sin for cos, sin in _TRI]
    return np.maximum(np.maximum(edges[0], edges[1]), edges[2]) - 0.6 * h


def _cross(u, v, h):
    au, av, arm, bar = np.abs(u), np.abs(v), h, 0.33 * h
    return np.minimum(np.maximum(au - arm, av - bar), np.maximum(au - bar, av - arm))
