"""Hostile JPEG files given to the image decoder, whose JPEG path is the region-of-interest
kernel (``kernels/cpu/jpeg/jpeg_roi.c``): each case in its own process under a memory and time
bound ends in one ``neonlite: error:`` line naming the file (the data set's DataError), or
decodes where the file is fine; nothing printed by libjpeg, no exit() from it, no hang.  The
table (attack -> outcome -> seconds, peak MiB, message) is written to the test's tmp folder
as attacks.tsv."""
import io
import struct

import numpy as np
import pytest
from PIL import Image
from support.isolated import AttackTable, python_argv, run_isolated
from support.requires import requires

pytestmark = requires("jpeg_kernel")

#: decode file sys.argv[1] (box: the rest of argv, else the whole image) with the kernel,
#: one line on DataError; ``setup`` runs first
DECODE = """
import sys
import numpy as np
from neonlite.data import jpeg_kernel
from neonlite.data.image_decode import Decoder
from neonlite.data.iterator import DataError
{setup}
decoder = Decoder(3)
assert decoder.jpeg is not None
try:
    box = [int(v) for v in sys.argv[2:]] or None
    if box is None:
        pixels = decoder.decode(sys.argv[1])
    else:
        pixels, (top, left, height, width) = decoder.decode_box(sys.argv[1], np.array(box),
                                                                (box[2], box[3]))
        pixels = pixels[top:top + height, left:left + width]
except DataError as err:
    print(f"neonlite: error: {{err}}", file=sys.stderr)
    sys.exit(1)
print(pixels.shape)
"""


def segments(data):
    """[(marker, bytes of the whole segment)] of JPEG ``data`` up to its first SOS, then
    ("scans", the rest)."""
    out, i = [("SOI", data[:2])], 2
    while i < len(data):
        marker, length = data[i + 1], struct.unpack(">H", data[i + 2:i + 4])[0]
        if marker == 0xDA:
            out.append(("scans", data[i:]))
            break
        out.append((marker, data[i:i + 2 + length]))
        i += 2 + length
    return out


def photo_jpeg(size=(96, 128), **options):
    rng = np.random.default_rng(0)
    buffer = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, size + (3,), dtype=np.uint8)).save(
        buffer, "JPEG", quality=90, **options)
    return buffer.getvalue()


def with_size(data, height, width):
    """``data`` with its frame header (SOF0/SOF2) claiming ``height`` x ``width``."""
    for marker, segment in segments(data):
        if marker in (0xC0, 0xC2):
            start = data.index(segment)
            return data[:start + 5] + struct.pack(">HH", height, width) + data[start + 9:]
    raise AssertionError("no frame header")


def bogus_huffman(data):
    """``data`` with its first Huffman table's code counts made impossible (over 256)."""
    for marker, segment in segments(data):
        if marker == 0xC4:
            start = data.index(segment) + 5
            return data[:start] + bytes([255] * 16) + data[start + 16:]
    raise AssertionError("no Huffman table")


def many_scans(count, size=2048):
    """A progressive grayscale JPEG of ``size`` x ``size`` pixels: its DC scan, then
    ``count`` copies of an AC scan header with no data (each walks every block of the image
    in libjpeg), then EOI: the known progressive-JPEG denial of service, in a small file."""
    buffer = io.BytesIO()
    Image.fromarray(np.full((size, size), 128, np.uint8)).save(buffer, "JPEG", quality=90,
                                                              progressive=True)
    parts = segments(buffer.getvalue())
    header = b"".join(s for m, s in parts if m not in ("scans", 0xC4))
    scans = parts[-1][1]
    tables, i = [], 0
    while i < len(scans) - 2:
        if scans[i] == 0xFF and scans[i + 1] == 0xC4:
            length = struct.unpack(">H", scans[i + 2:i + 4])[0]
            tables.append(scans[i:i + 2 + length])
            i += 2 + length
        else:
            i += 1
    dht = b"".join(s for m, s in parts if m == 0xC4) + b"".join(tables)
    dc_scan = scans[:min(scans.index(marker, 2) for marker in (b"\xff\xc4", b"\xff\xda")
                         if marker in scans[2:])]
    # one component (id 1), tables 0, spectral band 1..63, no successive approximation
    ac_header = b"\xff\xda\x00\x08\x01\x01\x00\x01\x3f\x00"
    return header + dht + dc_scan + ac_header * count + b"\xff\xd9"


def kernel_call(*box):
    """The ``setup`` of :data:`DECODE` that hands file sys.argv[1] to the kernel itself
    (no Pillow header check first) for ``box``, one line on DataError."""
    return ("from neonlite.data.image_decode import MAX_PIXELS, MAX_SIDE\n"
            "data = open(sys.argv[1], 'rb').read()\n"
            "try:\n"
            "    jpeg_kernel.decode_jpeg(jpeg_kernel.jpeg_module(), data, sys.argv[1], "
            f"{list(box)}, 1, 3, MAX_SIDE, MAX_PIXELS)\n"
            "except DataError as err:\n"
            "    print(f'neonlite: error: {err}', file=sys.stderr)\n"
            "    sys.exit(1)\n")


@pytest.fixture
def attack(tmp_path):
    table = AttackTable(tmp_path / "attacks.tsv")

    def run(name, data, box=(), setup="", expect="one-line error", seconds=60, suffix=".jpg"):
        path = tmp_path / f"case{len(table.rows)}{suffix}"
        path.write_bytes(data)
        result = table.add(name, run_isolated(
            python_argv(DECODE.format(setup=setup)) + [str(path), *map(str, box)],
            cwd=tmp_path, memory_mib=1536, seconds=seconds))
        assert result.outcome == expect, (name, result.stdout[-500:], result.stderr[-2000:])
        assert "Traceback" not in result.stderr and "JPEG" not in result.stdout
        if expect == "one-line error":
            assert str(path) in result.message, result.message
        return result
    yield run
    table.write()


def test_hostile_jpegs_each_give_one_line_naming_the_file(attack):
    good = photo_jpeg()
    assert "(96, 128, 3)" in attack("a good JPEG (control)", good, expect="success").stdout
    message = attack("truncated at a third", good[:len(good) // 3]).message
    assert "corrupt or truncated image" in message and "Premature end" in message
    assert "(8, 9, 3)" in attack("truncated, box above the cut (decoded)", good[:len(good) * 2 // 3],
                                 (0, 0, 8, 9), expect="success").stdout
    assert "Huffman" in attack("corrupted Huffman table", bogus_huffman(good)).message
    start = good.index(b"\xff\xda") + 20
    assert "(96, 128, 3)" in attack("entropy data overwritten with markers (warnings only)",
                                    good[:start] + b"\xff\xd0" * 200 + good[start + 400:],
                                    expect="success").stdout
    assert "corrupt or truncated" in attack("headers overwritten with markers, to the kernel",
                                            good[:60] + b"\xff\xd0" * 200 + good[460:],
                                            setup=kernel_call(0, 0, 5, 7)).message
    assert "refused before decoding" in attack("65000 x 60000 claimed by a 2 kB file",
                                               with_size(good[:2000], 65000, 60000)).message
    message = attack("65000 x 4000 claimed by a 2 kB file (under the pixel limit)",
                     with_size(good[:2000], 65000, 4000)).message
    assert "corrupt or truncated image" in message
    message = attack("10^5 progressive scans", many_scans(100000), seconds=60).message
    assert "more than 500 progressive scans" in message
    message = attack("progressive, libjpeg's memory capped at 1 MiB", photo_jpeg(
        (1024, 1024), progressive=True), setup="jpeg_kernel.MAX_DECODE_BYTES = 1 << 20").message
    assert "needs more than the 1 MiB of working memory" in message
    message = attack("65000 x 60000 given to the kernel itself", with_size(good[:2000], 65000,
                                                                           60000),
                     setup=kernel_call(0, 0, 5, 7)).message
    assert "too large to decode (the image is 65000x60000" in message
    assert "refused before decoding" in message


def test_the_kernel_refuses_what_pillow_would_not_open_either(attack):
    """A PNG named .jpg is Pillow's (its format is read from the bytes); PNG bytes or text
    handed to the kernel itself are one line; an empty file is one line."""
    buffer = io.BytesIO()
    Image.fromarray(np.zeros((5, 7, 3), np.uint8)).save(buffer, "PNG")
    assert "(5, 7, 3)" in attack("a PNG named .jpg", buffer.getvalue(), expect="success").stdout
    setup = kernel_call(0, 0, 5, 7)
    assert "Not a JPEG file" in attack("PNG bytes given to the kernel", buffer.getvalue(),
                                       setup=setup).message
    assert "empty file" in attack("an empty file given to the kernel", b"", setup=setup).message
    assert "not a PNG or JPEG image" in attack("text named .jpg", b"hello " * 40).message


def resident_mib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / (1 << 20)


def test_no_path_leaks_a_decompressor(monkeypatch):
    """Every way out of the kernel (decoded, corrupt mid-decode, refused from the header,
    too many scans, memory cap, CMYK handed back) frees libjpeg's struct and pools: resident
    memory stays flat over hundreds of calls of each."""
    from neonlite.data import jpeg_kernel
    from neonlite.data.image_decode import MAX_PIXELS, MAX_SIDE
    module = jpeg_kernel.jpeg_module()
    good = photo_jpeg((256, 256))
    cmyk = io.BytesIO()
    Image.fromarray(np.zeros((64, 64, 3), np.uint8)).convert("CMYK").save(cmyk, "JPEG")
    cases = [good, good[:len(good) // 2], bogus_huffman(good),
             with_size(good[:2000], 65000, 60000), many_scans(600, size=64),
             photo_jpeg((512, 512), progressive=True), cmyk.getvalue()]
    monkeypatch.setattr(jpeg_kernel, "MAX_DECODE_BYTES", 1 << 20)

    def rounds(count):
        for _ in range(count):
            for data in cases:
                try:
                    jpeg_kernel.decode_jpeg(module, data, "x.jpg", [0, 0, 64, 64], 1, 3,
                                            MAX_SIDE, MAX_PIXELS)
                except jpeg_kernel.DataError:
                    pass
    rounds(30)
    before = resident_mib()
    rounds(300)
    assert resident_mib() - before < 4, (before, resident_mib())
