"""Downloads against a local HTTP server on 127.0.0.1 serving files the test made: verified
files land in place, corrupted, short, missing or stalled ones are rejected and leave nothing
behind; MNIST fetches missing files and explains itself when it cannot."""
import functools
import hashlib
import http.server
import os
import shutil
import socket
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from neonlite.data import MNIST, ChecksumError, DataError, DownloadError
from neonlite.data.datadir import dataset_dir, resolve_data_dir
from neonlite.data.download import download, md5_file
from neonlite.data.idx import write_idx

from support.harness import data_dir
from support.requires import requires

SHARED = data_dir()
T10K = ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")


class _Handler(http.server.SimpleHTTPRequestHandler):
    """Serves the test's folder; ``/short/NAME`` promises more bytes than it sends."""

    def do_GET(self):
        if self.path.startswith("/short/"):
            body = b"only part of it"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body) + 1000))
            self.end_headers()
            self.wfile.write(body)
            return
        super().do_GET()

    def log_message(self, *args):
        pass


@pytest.fixture
def server(tmp_path):
    """(base URL, folder served) of an HTTP server on 127.0.0.1."""
    served = tmp_path / "served"
    served.mkdir()
    httpd = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(_Handler, directory=str(served)))
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/", served
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def closed_port():
    """A 127.0.0.1 port with nothing listening (connections are refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _leftovers(folder):
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def test_verified_download_lands_in_place(tmp_path, server):
    url, served = server
    payload = os.urandom(200_000)
    (served / "blob.bin").write_bytes(payload)
    dest = tmp_path / "data" / "sub" / "blob.bin"
    out = download(url + "blob.bin", dest, md5=hashlib.md5(payload).hexdigest(), timeout=5)
    assert out == dest and dest.read_bytes() == payload
    assert _leftovers(dest.parent) == ["blob.bin"]
    assert md5_file(dest) == hashlib.md5(payload).hexdigest()


def test_corrupted_file_is_rejected_and_removed(tmp_path, server):
    url, served = server
    good = os.urandom(50_000)
    bad = bytearray(good)
    bad[1234] ^= 0xFF
    (served / "blob.bin").write_bytes(bytes(bad))
    dest = tmp_path / "data" / "blob.bin"
    with pytest.raises(ChecksumError) as err:
        download(url + "blob.bin", dest, md5=hashlib.md5(good).hexdigest(), timeout=5)
    assert hashlib.md5(good).hexdigest() in str(err.value) and str(dest) in str(err.value)
    assert _leftovers(dest.parent) == []


def test_existing_file_survives_a_failed_download(tmp_path, server):
    url, served = server
    (served / "blob.bin").write_bytes(b"new but wrong")
    dest = tmp_path / "blob.bin"
    dest.write_bytes(b"old")
    with pytest.raises(ChecksumError):
        download(url + "blob.bin", dest, md5="0" * 32, timeout=5)
    assert dest.read_bytes() == b"old" and _leftovers(tmp_path) == ["blob.bin", "served"]


def test_http_error_and_short_transfer(tmp_path, server):
    url, _ = server
    with pytest.raises(DownloadError, match="HTTP 404.*put it at"):
        download(url + "nothing-here.bin", tmp_path / "x.bin", timeout=5)
    with pytest.raises(DownloadError, match="short/x.bin: .*(stopped after|received) 15"):
        download(url + "short/x.bin", tmp_path / "x.bin", timeout=5)
    assert _leftovers(tmp_path) == ["served"]


def test_unreachable_server_says_where_to_put_the_file(tmp_path, closed_port):
    dest = tmp_path / "x.bin"
    with pytest.raises(DownloadError) as err:
        download(f"http://127.0.0.1:{closed_port}/x.bin", dest, timeout=5)
    assert "network reachable" in str(err.value) and f"put it at {dest}" in str(err.value)
    assert _leftovers(tmp_path) == []


def test_a_silent_server_times_out_in_bounded_time(tmp_path):
    with socket.socket() as listener:  # accepts connections (backlog) but never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen(4)
        start = time.monotonic()
        with pytest.raises(DownloadError, match="no answer within 0.5 s"):
            download(f"http://127.0.0.1:{listener.getsockname()[1]}/x", tmp_path / "x",
                     timeout=0.5)
        assert time.monotonic() - start < 10
    assert _leftovers(tmp_path) == []


def test_only_http_https_file_urls(tmp_path):
    with pytest.raises(ValueError, match="url must start with"):
        download("ftp://example.org/x", tmp_path / "x")


def test_data_dir_resolution(tmp_path, monkeypatch):
    monkeypatch.delenv("NEONLITE_DATA", raising=False)
    assert resolve_data_dir() == Path.home() / ".neonlite" / "data"
    monkeypatch.setenv("NEONLITE_DATA", str(tmp_path / "env"))
    assert resolve_data_dir() == tmp_path / "env"
    assert resolve_data_dir(tmp_path / "arg") == tmp_path / "arg"
    assert dataset_dir("mnist", tmp_path) == tmp_path / "mnist"
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert resolve_data_dir("~/d") == tmp_path / "home" / "d"


def _own_train_files(root):
    folder = root / "mnist"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    write_idx(str(folder / "train-images-idx3-ubyte"),
              rng.integers(0, 256, (20, 28, 28), dtype=np.uint8))
    write_idx(str(folder / "train-labels-idx1-ubyte"), rng.integers(0, 10, 20).astype(np.uint8))
    return folder


@requires("mnist")
def test_mnist_downloads_missing_files_with_the_published_checksums(tmp_path, server):
    url, served = server
    for name in T10K:
        shutil.copy(SHARED / "mnist" / name, served / name)
    folder = _own_train_files(tmp_path / "root")
    (_, _), (Xte, yte) = MNIST(path=tmp_path / "root", mirror=url, timeout=5).load()
    assert Xte.shape == (10000, 28, 28, 1) and yte.shape == (10000,)
    assert sorted(_leftovers(folder)) == sorted(["train-images-idx3-ubyte",
                                                 "train-labels-idx1-ubyte", *T10K])


def test_mnist_rejects_a_corrupted_download(tmp_path, server):
    url, served = server
    (served / "t10k-images-idx3-ubyte.gz").write_bytes(b"\x1f\x8b not the published file")
    folder = _own_train_files(tmp_path / "root")
    with pytest.raises(ChecksumError, match="t10k-images-idx3-ubyte.gz: the downloaded file "
                                            "has md5 .* but 9fb629c4189551a2d022fa330f9573f3"):
        MNIST(path=tmp_path / "root", mirror=url, timeout=5).load()
    assert sorted(_leftovers(folder)) == ["train-images-idx3-ubyte", "train-labels-idx1-ubyte"]


def test_mnist_offline_names_the_files_and_the_folder(tmp_path, closed_port):
    with pytest.raises(DataError) as err:
        MNIST(path=tmp_path, mirror=f"http://127.0.0.1:{closed_port}/", timeout=5).load()
    msg = str(err.value)
    for name in ("train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                 "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"):
        assert name in msg
    assert f"{tmp_path / 'mnist'}/" in msg and "downloading failed" in msg
    assert _leftovers(tmp_path / "mnist") == []
