"""Hostile image folders and manifests given to ``neonlite train``: each case in its own
process under a memory and time bound (``-q``: no progress lines) ends in one ``neonlite:
error:`` line naming the file or option, and leaves no loader worker behind (the table is written to the test's tmp folder as
attacks.tsv)."""
import os
import struct
import zlib

import numpy as np
import pytest
from PIL import Image
from support.isolated import AttackTable, neonlite_argv, python_argv, run_isolated
from support.loader_workers import orphan_workers

RUN = """\
epochs: 2
batchsize: 4
rng_seed: 0
dataset: {{type: image_folder, config: {{root: {root}, valid_fraction: 0.25, num_workers: 2{extra}}}}}
layers:
  - {{type: Conv, config: {{fshape: [3, 3, 4], activation: {{type: Rectlin}}}}}}
  - {{type: Affine, config: {{nout: auto, activation: {{type: Softmax}}}}}}
cost: CrossEntropyMulti
optimizer: {{type: Adam}}
"""

#: neonlite train, with a callback that at the second step does something to a loader worker
#: of this process (signal sys.argv[1]) and waits for the run to notice
HURT_WORKER = """
import os, signal, sys, time
from pathlib import Path
from neonlite.callbacks import FunctionCallback
from neonlite.cli import main
from neonlite.config.run import RunConfig
sig, steps, build = getattr(signal, sys.argv[1]), [0], RunConfig.build_callbacks

def workers():
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                line = (entry / "cmdline").read_bytes().replace(b"\\0", b" ").decode()
            except OSError:
                continue
            if "worker_main(" in line and line.rstrip().endswith(f", {os.getpid()})"):
                yield int(entry.name)

def hurt(epoch, batch, cost):
    steps[0] += 1
    if steps[0] == 2:
        for pid in workers():
            os.kill(pid, sig)

RunConfig.build_callbacks = lambda self: build(self) + [FunctionCallback(on_minibatch_end=hurt)]
sys.exit(main(sys.argv[2:]))
"""


def write_images(folder, per_class=(6, 6), size=(8, 8)):
    rng = np.random.default_rng(0)
    for c, count in enumerate(per_class):
        (folder / f"c{c}").mkdir(parents=True, exist_ok=True)
        for i in range(count):
            Image.fromarray(rng.integers(0, 256, size + (3,), dtype=np.uint8)).save(
                folder / f"c{c}" / f"{i:03d}.png")
    return folder


def png_claiming(width, height):
    """A PNG whose header declares ``width`` x ``height`` pixels (and holds almost none)."""
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    chunk = b"IHDR" + header
    ihdr = struct.pack(">I", len(header)) + chunk + struct.pack(">I", zlib.crc32(chunk))
    data = zlib.compress(b"\0" * 64)
    idat = struct.pack(">I", len(data)) + b"IDAT" + data + \
        struct.pack(">I", zlib.crc32(b"IDAT" + data))
    iend = struct.pack(">I", 0) + b"IEND" + struct.pack(">I", zlib.crc32(b"IEND"))
    return b"\x89PNG\r\n\x1a\n" + ihdr + idat + iend


@pytest.fixture
def attack(tmp_path):
    table = AttackTable(tmp_path / "attacks.tsv")

    def run(name, root, extra="", expect="one-line error", argv=None, seconds=120):
        run_file = tmp_path / f"run_{len(table.rows)}.yaml"
        run_file.write_text(RUN.format(root=root, extra=extra))
        argv = argv(run_file) if argv else neonlite_argv("train", "-q", run_file)
        result = table.add(name, run_isolated(argv, cwd=tmp_path, memory_mib=3072,
                                              seconds=seconds))
        assert result.outcome == expect, (name, result.stderr[-2000:])
        assert orphan_workers() == [], f"{name}: loader workers left behind"
        return result.message
    yield run
    table.write()


def test_bad_images_each_give_one_line_naming_the_file(tmp_path, attack):
    root = write_images(tmp_path / "truncated")
    bad = root / "c1" / "003.png"
    bad.write_bytes(bad.read_bytes()[:70])
    assert f"{bad}: corrupt or truncated image" in attack("truncated PNG", root)
    root = write_images(tmp_path / "text")
    (root / "c0" / "009.png").write_text("not a picture\n" * 10)
    assert f"{root / 'c0' / '009.png'}: not a PNG or JPEG image" in attack("text as .png", root)
    root = write_images(tmp_path / "notes")
    (root / "c1" / "notes.txt").write_text("hello")
    assert "notes.txt: not an image file by its name" in attack("a .txt file", root)
    root = write_images(tmp_path / "empty")
    (root / "c2").mkdir()
    assert f"{root / 'c2'}: empty class folder" in attack("empty class folder", root)
    root = write_images(tmp_path / "bomb")
    (root / "c0" / "010.png").write_bytes(png_claiming(60000, 60000))
    assert "refused before decoding" in attack("decompression bomb header", root)
    root = write_images(tmp_path / "fifo")
    os.mkfifo(root / "c0" / "011.png")
    assert "011.png: not a regular file (a FIFO" in attack("a FIFO named .png", root)
    root = write_images(tmp_path / "mixed")
    Image.fromarray(np.zeros((9, 8, 3), np.uint8)).save(root / "c1" / "big.png")
    assert "big.png: the image is 9x8" in attack("mixed sizes, no resize", root)
    root = write_images(tmp_path / "crop")
    message = attack("crop larger than the padded image", root,
                     ", augment: [{type: pad_crop, config: {size: 16, pad: 2}}]")
    assert "augment" in message and "pad" in message


def write_jpegs(folder, per_class=(6, 6), size=(64, 80)):
    rng = np.random.default_rng(1)
    for c, count in enumerate(per_class):
        (folder / f"c{c}").mkdir(parents=True, exist_ok=True)
        for i in range(count):
            Image.fromarray(rng.integers(0, 256, size + (3,), dtype=np.uint8)).save(
                folder / f"c{c}" / f"{i:03d}.jpg", quality=90)
    return folder


SCALED = ", augment: [{type: random_resized_crop, config: {size: 8}}, flip]"


def test_jpegs_decoded_at_reduced_scale_give_one_line_too(tmp_path, attack):
    """The jpeg_draft path (headers first, then scaled decodes) and its option."""
    root = write_jpegs(tmp_path / "truncated")
    bad = root / "c0" / "004.jpg"
    bad.write_bytes(bad.read_bytes()[:400])
    assert f"{bad}: corrupt or truncated image" in attack("truncated JPEG, scaled decode",
                                                          root, SCALED)
    root = write_jpegs(tmp_path / "text")
    (root / "c1" / "002.jpg").write_text("not a picture\n" * 10)
    assert "002.jpg: not a PNG or JPEG image" in attack("text as .jpg, scaled decode", root,
                                                        SCALED)
    attack("truncated JPEG, scaled decode, skip_corrupt", tmp_path / "truncated",
           SCALED + ", skip_corrupt: true", expect="success")
    message = attack("jpeg_draft not a boolean", write_jpegs(tmp_path / "option"),
                     SCALED + ", jpeg_draft: sometimes")
    assert "jpeg_draft" in message and "true or false" in message and "sometimes" in message


def test_skip_corrupt_counts_instead_of_stopping(tmp_path, attack):
    root = write_images(tmp_path / "truncated")
    bad = root / "c1" / "003.png"
    bad.write_bytes(bad.read_bytes()[:70])
    attack("truncated PNG, skip_corrupt", root, ", skip_corrupt: true", expect="success")
    done = run_isolated(neonlite_argv("train", tmp_path / "run_0.yaml"), cwd=tmp_path,
                        memory_mib=3072, seconds=120)
    epochs = [line for line in done.stderr.splitlines() if line.startswith("epoch ")]
    assert done.status == 0 and len(epochs) == 2, done.stderr
    assert all("1 corrupt image skipped" in line for line in epochs), epochs


def test_bad_manifests_each_give_one_line_naming_the_line(tmp_path, attack):
    write_images(tmp_path / "img")
    cases = {"missing file": ("img/c0/000.png,a\nimg/c0/999.png,b\n", ":2: ", "no such file"),
             "negative label": ("img/c0/000.png,-1\nimg/c0/001.png,1\n", ":1: ", "negative"),
             "three fields": ("img/c0/000.png,a,b\n", ":1: ", "two fields"),
             "not UTF-8": (b"img/c0/000.png,\xff\xfe\n", "", "not UTF-8")}
    for name, (text, where, words) in cases.items():
        manifest = tmp_path / f"{name.replace(' ', '_')}.csv"
        (manifest.write_bytes if isinstance(text, bytes) else manifest.write_text)(text)
        run = tmp_path / f"{manifest.stem}.yaml"
        run.write_text(RUN.format(root="x", extra="").replace(
            "root: x", f"manifest: {manifest}"))
        message = attack(f"manifest: {name}", "x", argv=lambda _: neonlite_argv("train", "-q", run))
        assert f"{manifest}{where}" in message and words in message, message


#: drop the capabilities that let root read any file (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH)
DROP_READ_ANYTHING = """
import ctypes
class Header(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]
class Caps(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32)]
libc, header, caps = ctypes.CDLL(None, use_errno=True), Header(0x20080522, 0), (Caps * 2)()
assert libc.capget(ctypes.byref(header), caps) == 0
caps[0].effective &= ~0b110
caps[0].permitted &= ~0b110
assert libc.capset(ctypes.byref(header), caps) == 0
"""


def test_an_unreadable_image_is_one_line(tmp_path, attack):
    """Root reads every file, so the run first drops the capabilities that let it."""
    root = write_images(tmp_path / "root")
    os.chmod(root / "c1" / "002.png", 0o000)
    code = DROP_READ_ANYTHING + ("import sys\nfrom neonlite.cli import main\n"
                                 "sys.exit(main(['train', '-q', sys.argv[1]]))\n")
    message = attack("unreadable image", root, argv=lambda run: python_argv(code) + [str(run)])
    assert "002.png" in message and "Permission denied" in message


@pytest.mark.parametrize("sig,words", [("SIGKILL", "died (killed by signal SIGKILL)"),
                                       ("SIGSTOP", "made no progress for 3 s")])
def test_a_worker_that_dies_or_hangs_ends_the_run_in_one_line(tmp_path, attack, sig, words):
    root = write_images(tmp_path / "imgs", per_class=(40, 40))
    message = attack(f"worker {sig}", root, ", worker_timeout: 3, prefetch: 1",
                     argv=lambda run: python_argv(HURT_WORKER) + [sig, "train", "-q", str(run)])
    assert "loader worker" in message and words in message
