"""What a user installs is what the tests cover: the sdist and the wheel build, the wheel holds
every module and kernel source of the checkout, and it imports in a fresh virtual environment
made outside the checkout (no ``-e``, no checkout on ``sys.path``)."""
import os
import re
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
from support.harness import CHECKOUT
from support.requires import requires

ROOT = CHECKOUT
TESTS = CHECKOUT / "tests"
# Source folder -> the import name its files install under (setup.py's mapping).
SOURCE_FOLDERS = {"neonlite": "neonlite", "backends": "neonlite/backends",
                  "layers": "neonlite/layers", "kernels": "neonlite/kernels"}
PACKAGED_SUFFIXES = (".py", ".c", ".h", ".cu", ".cuh")
DEPENDENCIES = ("numpy", "cffi", "h5py", "yaml", "tqdm")


def checkout_files():
    """Every module and kernel source of the checkout, as the path it has inside the wheel."""
    found = set()
    for folder, installed in SOURCE_FOLDERS.items():
        for path in (ROOT / folder).rglob("*"):
            if path.suffix in PACKAGED_SUFFIXES and "__pycache__" not in path.parts:
                found.add(f"{installed}/{path.relative_to(ROOT / folder).as_posix()}")
    return found


@pytest.fixture(scope="module")
def dist(tmp_path_factory):
    """The sdist and the wheel that ``python -m build`` makes (the wheel is built from the
    sdist, so a file the sdist forgets is missing from the wheel too)."""
    pytest.importorskip("build", reason="needs the 'build' package (pip install 'neonlite[test]')")
    pytest.importorskip("setuptools", reason="needs setuptools (pip install 'neonlite[test]')")
    pytest.importorskip("wheel", reason="needs the 'wheel' package (pip install 'neonlite[test]')")
    out = tmp_path_factory.mktemp("dist")
    done = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out),
                           str(ROOT)], capture_output=True, text=True, timeout=600, cwd=out)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    wheels, sdists = list(out.glob("neonlite-*.whl")), list(out.glob("neonlite-*.tar.gz"))
    assert len(wheels) == 1 and len(sdists) == 1, sorted(p.name for p in out.iterdir())
    return sdists[0], wheels[0]


def _version():
    text = (ROOT / "neonlite" / "version.py").read_text()
    return re.search(r'^__version__ = "([^"]+)"$', text, re.M).group(1)


def test_wheel_holds_every_module_and_kernel_source(dist):
    _, wheel = dist
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    missing = sorted(checkout_files() - names)
    assert not missing, f"{wheel.name} lacks {missing}"
    assert not [n for n in names if n.startswith(("tests/", "benchmarks/", "examples/"))]
    assert wheel.name.startswith(f"neonlite-{_version()}-")


def test_sdist_holds_the_sources_and_builds(dist):
    sdist, _ = dist
    with tarfile.open(sdist) as archive:
        names = {n.split("/", 1)[1] for n in archive.getnames() if "/" in n}
    for required in ("setup.py", "pyproject.toml", "README.md", "neonlite/version.py",
                     "kernels/cuda/neonlite_common.cuh"):
        assert required in names, f"{sdist.name} lacks {required}"


def _fresh_venv(tmp_path, wheel):
    """A virtual environment outside the checkout with ``wheel`` installed (no dependencies
    from an index: a .pth file lends it the folders this interpreter finds them in)."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=120)
    python = venv / "bin" / "python"
    done = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install",
                           "--no-deps", "--no-index", "--quiet", str(wheel)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    site = subprocess.run([str(python), "-c", "import sysconfig; "
                           "print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    lent = {str(Path(__import__(name).__file__).resolve().parents[1]) for name in DEPENDENCIES}
    Path(site, "_neonlite_test_dependencies.pth").write_text("\n".join(sorted(lent)) + "\n")
    return venv, python


def test_wheel_imports_every_module_in_a_fresh_venv(dist, tmp_path):
    _, wheel = dist
    venv, python = _fresh_venv(tmp_path, wheel)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    done = subprocess.run([str(python), str(TESTS / "support" / "import_every_module.py"), "--outside",
                           str(ROOT)], capture_output=True, text=True, timeout=600,
                          cwd=tmp_path, env=env)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    where = re.search(r"neonlite from (\S+),", done.stdout).group(1)
    assert Path(where).resolve().is_relative_to(venv.resolve()), done.stdout
    count = int(re.search(r"(\d+) of \1 modules imported", done.stdout).group(1))
    assert count >= len([f for f in checkout_files() if f.endswith(".py")])

    version = subprocess.run([str(venv / "bin" / "neonlite"), "--version"], capture_output=True,
                             text=True, timeout=120, cwd=tmp_path, env=env)
    assert version.returncode == 0, version.stderr
    assert version.stdout.strip() == f"neonlite {_version()}"


def test_pytest_from_the_checkout_root_tests_the_installed_package(dist, tmp_path):
    """``python -m pytest`` from the root puts the root first on ``sys.path``, where the
    checkout's partial ``neonlite/`` folder would shadow the installed package; conftest takes
    the root off, and with NEONLITE_TEST_INSTALLED=1 it stops a run that imports the checkout."""
    _, wheel = dist
    venv, python = _fresh_venv(tmp_path, wheel)
    lent = Path(pytest.__file__).resolve().parents[1]
    site = next(venv.glob("lib/python*/site-packages"))
    with open(site / "_neonlite_test_dependencies.pth", "a") as pth:
        pth.write(f"{lent}\n")
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSAFEPATH")}
    env["NEONLITE_TEST_INSTALLED"] = "1"
    done = subprocess.run([str(python), "-m", "pytest", "--collect-only", "-p",
                           "no:cacheprovider", str(Path(__file__).resolve().relative_to(ROOT))],
                          capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    header = re.search(r"^neonlite \S+ from (\S+)$", done.stdout, re.M)
    assert header and Path(header.group(1)).is_relative_to(site.resolve()), done.stdout[:2000]


@requires("jpeg_kernel")
def test_the_installed_wheel_builds_the_jpeg_kernel_from_its_own_sources(dist, tmp_path):
    """The region-of-interest JPEG kernel compiles from the C sources inside the installed
    package (kernels/cpu/jpeg/), links the system's libjpeg and decodes a box as here."""
    import numpy as np
    from PIL import Image
    from neonlite.data.jpeg_kernel import decode_jpeg, jpeg_module
    _, wheel = dist
    venv, python = _fresh_venv(tmp_path, wheel)
    path = tmp_path / "a.jpg"
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (40, 50, 3), np.uint8)).save(
        path, quality=90)
    code = ("import sys; from neonlite.data import jpeg_kernel as j; "
            "from neonlite.kernels.specs import find; "
            "print(find('jpeg_roi').source_path); "
            "print(j.jpeg_decoder_state()[1]); "
            "p = j.decode_jpeg(j.jpeg_module(), open(sys.argv[1], 'rb').read(), 'a', "
            "[3, 5, 17, 29], 1, 3, 1 << 16, 1 << 28); print(p.tobytes().hex())")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["NEONLITE_CACHE_DIR"] = str(tmp_path / "cache")
    done = subprocess.run([str(python), "-c", code, str(path)], capture_output=True, text=True,
                          timeout=600, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    source, state, pixels = done.stdout.split("\n")[:3]
    assert Path(source).resolve().is_relative_to(venv.resolve()), source
    assert "region-of-interest kernel on libjpeg" in state, state
    want = decode_jpeg(jpeg_module(), path.read_bytes(), "a", [3, 5, 17, 29], 1, 3, 1 << 16,
                       1 << 28)
    assert bytes.fromhex(pixels) == want.tobytes()
