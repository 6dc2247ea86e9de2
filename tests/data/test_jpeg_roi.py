"""The region-of-interest JPEG kernel (``kernels/cpu/jpeg/jpeg_roi.c``): a box decoded alone
has the pixels of the same libjpeg's full decode cut to the box, bit for bit, at every scale,
for odd boxes touching each edge, 4:2:0, 4:2:2, 4:1:1, 4:4:4 and grayscale files, baseline and
progressive, with restart markers; Pillow's full decode (its own libjpeg-turbo) and its draft
give the same bits; files the kernel does not take go to Pillow; where the compiler finds no
libjpeg the variant builds as a stub and Pillow decodes."""
import io
import itertools

import numpy as np
import pytest
from PIL import Image
from support.requires import requires

from neonlite.data.image_decode import MAX_PIXELS, MAX_SIDE, Decoder
from neonlite.data.jpeg_kernel import ROW_SLACK, decode_jpeg, decode_jpeg_into, jpeg_module
from neonlite.kernels.build import Builder
from neonlite.kernels.specs import find
from neonlite.kernels.toolchain import CCompiler

pytestmark = requires("jpeg_kernel")

#: (name, Pillow save options): the chroma layouts, progressive, restart markers
LAYOUTS = [("4:4:4", dict(subsampling=0)), ("4:2:2", dict(subsampling=1)),
           ("4:2:0", dict(subsampling=2)), ("4:1:1", dict(subsampling="4:1:1")),
           ("4:2:0 progressive", dict(subsampling=2,
                                                                      progressive=True)),
           ("4:2:2 progressive", dict(subsampling=1, progressive=True)),
           ("4:2:0 restarts", dict(subsampling=2, restart_marker_blocks=3)),
           ("4:4:4 restarts", dict(subsampling=0, restart_marker_rows=1)),
           ("gray", dict(gray=True)), ("gray progressive", dict(gray=True, progressive=True))]
HEIGHT, WIDTH = 203, 299


def photo(seed=0, height=HEIGHT, width=WIDTH):
    """A uint8 (height, width, 3) picture: smooth colour fields, edges and noise."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[:height, :width]
    base = np.stack([np.sin(x / 7.0) * 80 + y * 0.3, np.cos(y / 5.0) * 70 + x * 0.2,
                     (x * y % 97) * 1.0], axis=-1) + 100
    return np.clip(base + rng.normal(0, 20, (height, width, 3)), 0, 255).astype(np.uint8)


def jpeg_bytes(pixels, gray=False, **options):
    buffer = io.BytesIO()
    image = Image.fromarray(pixels)
    (image.convert("L") if gray else image).save(buffer, "JPEG", quality=90, **options)
    return buffer.getvalue()


def kernel(data, box, scale=1, channels=3):
    return decode_jpeg(jpeg_module(), data, "test.jpg", box, scale, channels, MAX_SIDE,
                       MAX_PIXELS)


def boxes(hw, rng, count):
    """Odd boxes in an image of (H, W) ``hw``: the whole, each edge and corner, random."""
    h, w = hw
    fixed = [(0, 0, h, w), (0, 0, 1, 1), (h - 1, w - 1, 1, 1), (0, w - 1, h, 1),
             (h - 1, 0, 1, w), (0, 5, 9, w - 5), (3, 0, h - 3, 13), (h - 11, w - 17, 11, 17)]
    for _ in range(count):
        top, left = int(rng.integers(0, h)), int(rng.integers(0, w))
        fixed.append((top, left, int(rng.integers(1, h - top + 1)),
                      int(rng.integers(1, w - left + 1))))
    return [b for b in fixed if b[2] >= 1 and b[3] >= 1]


@pytest.mark.parametrize("name, options", LAYOUTS, ids=[n for n, _ in LAYOUTS])
def test_a_box_equals_the_full_decode_cut_to_it(name, options):
    data = jpeg_bytes(photo(), **options)
    rng = np.random.default_rng(len(name))
    for scale, channels in itertools.product((1, 2, 4, 8), (3, 1)):
        hw = (-(-HEIGHT // scale), -(-WIDTH // scale))
        full = kernel(data, (0, 0, *hw), scale, channels)
        assert full.shape == hw + (channels,)
        for top, left, h, w in boxes(hw, rng, 24):
            got = kernel(data, (top, left, h, w), scale, channels)
            assert np.array_equal(got, full[top:top + h, left:left + w]), \
                (name, scale, channels, (top, left, h, w))


@pytest.mark.parametrize("name, options", LAYOUTS, ids=[n for n, _ in LAYOUTS])
def test_rows_decoded_in_place_hold_the_box_at_the_offset(name, options):
    """decode_jpeg_into: rows ROW_SLACK wider than the box take libjpeg's rows as they are
    (the box at the column it returns, past the first iMCU column for a box that starts
    inside one); rows too narrow, or a conversion to luma, get the box alone (offset 0).
    The bytes outside the rows' decoded columns are left as they were."""
    data = jpeg_bytes(photo(3), **options)
    rng = np.random.default_rng(len(name) + 7)
    for scale, channels in itertools.product((1, 2, 8), (3, 1)):
        hw = (-(-HEIGHT // scale), -(-WIDTH // scale))
        full = kernel(data, (0, 0, *hw), scale, channels)
        offsets = set()
        for top, left, h, w in boxes(hw, rng, 16):
            for width in (min(hw[1], w + ROW_SLACK), w):
                out = np.full((h, width, channels), 7, np.uint8)
                offset = decode_jpeg_into(jpeg_module(), data, "t.jpg", (top, left, h, w),
                                          scale, out, MAX_SIDE, MAX_PIXELS)
                assert np.array_equal(out[:, offset:offset + w],
                                      full[top:top + h, left:left + w]), (name, scale, width)
                if width == w or (channels == 1 and "gray" not in name):
                    assert offset == 0
                offsets.add(offset)
        assert channels == 1 and "gray" not in name or max(offsets) > 0, (name, scale)


def test_a_jpeg_the_kernel_takes_is_never_opened_by_pillow(tmp_path, monkeypatch):
    """Its header comes from libjpeg and its bytes are read once; a PNG still goes to
    Pillow."""
    path = tmp_path / "a.jpg"
    path.write_bytes(jpeg_bytes(photo(4), subsampling=2))
    want = np.asarray(Image.open(path).convert("RGB"))
    png = tmp_path / "b.png"
    Image.fromarray(photo(5)).save(png)
    opened = []
    real = Image.open
    monkeypatch.setattr(Image, "open", lambda fp, *a, **k: opened.append(fp) or real(fp, *a, **k))
    decoder = Decoder(3)
    with decoder.open(str(path)) as image:
        assert (image.height, image.width, image.mode) == (HEIGHT, WIDTH, "RGB")
    pixels, (top, left, height, width) = decoder.decode_box(str(path), [9, 31, 50, 70], (50, 70))
    assert np.array_equal(pixels[top:top + height, left:left + width], want[9:59, 31:101])
    assert np.array_equal(decoder.decode(str(path)), want)
    assert opened == []
    decoder.decode(str(png))
    assert len(opened) == 1


def test_a_file_the_kernel_hands_back_after_its_header_goes_to_pillow(tmp_path, monkeypatch):
    """A file whose header the kernel takes but whose decode it declines (arithmetic coding
    where libjpeg lacks it): Pillow decodes the bytes already read."""
    from neonlite.data import image_decode
    path = tmp_path / "a.jpg"
    path.write_bytes(jpeg_bytes(photo(6), subsampling=2))
    want = np.asarray(Image.open(path).convert("RGB"))
    monkeypatch.setattr(image_decode, "decode_jpeg_into", lambda *args: None)
    pixels, box = Decoder(3).decode_box(str(path), np.array([4, 8, 30, 40]), (30, 40))
    assert np.array_equal(pixels, want) and list(box) == [4, 8, 30, 40]


@pytest.mark.parametrize("keep", [0, 1 << 30])
def test_batches_read_again_the_files_past_the_kept_bytes(tmp_path, monkeypatch, keep):
    """The JPEGs read whole for their headers are kept for their decode up to KEEP_BYTES;
    past it they are read again: the same batch either way."""
    from neonlite.data import image_batch
    from neonlite.data.augment import Flip, Pipeline, RandomResizedCrop
    from neonlite.data.image_files import ImageFiles
    paths = [tmp_path / f"{i}.jpg" for i in range(6)]
    for i, path in enumerate(paths):
        path.write_bytes(jpeg_bytes(photo(i), subsampling=2))
    files = ImageFiles([str(p) for p in paths], np.zeros(6), ("x",), tmp_path)
    pipeline = Pipeline([RandomResizedCrop(32), Flip()])
    out = {}
    for kept in (keep, image_batch.KEEP_BYTES):
        monkeypatch.setattr(image_batch, "KEEP_BYTES", kept)
        maker = image_batch.BatchMaker(files, Decoder(3), pipeline)
        out[kept] = np.empty((6, 32, 32, 3), np.uint8)
        maker.make(np.arange(6), 5, out[kept])
    assert np.array_equal(*out.values())


@pytest.mark.parametrize("name, options", LAYOUTS, ids=[n for n, _ in LAYOUTS])
def test_pillow_gives_the_same_bits_full_and_drafted(name, options):
    """Pillow's own libjpeg-turbo (3.x), the same ISLOW IDCT and fancy upsampling: equal
    at full scale (RGB, and grayscale by its convert("L")) and at its draft scales."""
    data = jpeg_bytes(photo(1), **options)
    for mode, channels in (("RGB", 3), ("L", 1)):
        pillow = np.asarray(Image.open(io.BytesIO(data)).convert(mode))
        assert np.array_equal(kernel(data, (0, 0, HEIGHT, WIDTH), 1, channels),
                              pillow.reshape(HEIGHT, WIDTH, channels)), (name, mode)
    for scale in (2, 4, 8):
        image = Image.open(io.BytesIO(data))
        image.draft(image.mode, (WIDTH // scale, HEIGHT // scale))
        drafted = np.asarray(image.convert("RGB"))
        hw = (-(-HEIGHT // scale), -(-WIDTH // scale))
        assert drafted.shape[:2] == hw
        assert np.array_equal(kernel(data, (0, 0, *hw), scale, 3), drafted), (name, scale)


def test_the_decoder_decodes_boxes_and_whole_files_like_pillow(tmp_path):
    path = tmp_path / "a.jpg"
    path.write_bytes(jpeg_bytes(photo(2), subsampling=2))
    pillow = Decoder(3, jpeg_kernel=False)
    ours = Decoder(3)
    assert ours.jpeg is not None and pillow.jpeg is None
    whole = pillow.decode(str(path))
    assert np.array_equal(ours.decode(str(path)), whole)
    pixels, (top, left, height, width) = ours.decode_box(str(path), np.array([17, 33, 101, 157]),
                                                         (64, 64))
    assert top == 0 and (height, width) == (101, 157)
    assert np.array_equal(pixels[:, left:left + width], whole[17:118, 33:190])
    assert pixels.shape[1] <= width + ROW_SLACK


def test_cmyk_goes_to_pillow(tmp_path):
    path = tmp_path / "cmyk.jpg"
    Image.fromarray(photo(3)).convert("CMYK").save(path, quality=90)
    data = path.read_bytes()
    assert kernel(data, (0, 0, HEIGHT, WIDTH)) is None
    want = np.asarray(Image.open(path).convert("RGB"))
    assert np.array_equal(Decoder(3).decode(str(path)), want)
    pixels, box = Decoder(3).decode_box(str(path), np.array([5, 6, 50, 60]), (50, 60))
    assert np.array_equal(pixels, want) and list(box) == [5, 6, 50, 60]


def test_without_libjpeg_the_variant_is_a_stub_and_pillow_decodes(tmp_path, monkeypatch):
    """A compiler that finds no jpeglib.h or libjpeg builds the stub (its key differs)."""
    builder = Builder(tmp_path / "cache")
    spec = find("jpeg_roi")
    real = builder.load_cpu(spec)
    monkeypatch.setattr(CCompiler, "links", lambda self, library, header: False)
    stub = builder.__class__(tmp_path / "cache").load_cpu(spec)
    assert real.lib.jroi_version() >= 2000000 and stub.lib.jroi_version() == 0
    message = stub.ffi.new("char[]", 128)
    info = stub.ffi.new("int32_t[]", 6)
    assert stub.lib.jroi_header(b"\xff\xd8", 2, info, message, 128) == stub.lib.JROI_UNSUPPORTED
    assert b"without libjpeg" in stub.ffi.string(message)


def test_the_switch_turns_the_kernel_off(monkeypatch):
    monkeypatch.setenv("NEONLITE_JPEG_KERNEL", "0")
    assert jpeg_module() is None and Decoder(3).jpeg is None
