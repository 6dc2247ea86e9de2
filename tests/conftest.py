"""Shared pytest set-up: the ``slow`` marker, the per-backend fixture (see
``support/harness.py``), and the import paths.

The tests sit in folders by what they need: ``support/`` (the package every test imports its
helpers from: ``support.harness``, ``support.requires``, the CUDA host emulator and the GPU
backend on it), ``backend/`` (backend ops against the numpy reference on every backend),
``cpu/`` (the C kernels), ``gpu_host/`` (the CUDA kernels compiled with nvcc and run on the host
emulator), ``gpu/`` (a real device), ``api/`` (the public API on the CPU backend, one folder per
subject: ``layers/``, ``costs/`` (costs and metrics), ``optimizers/``, ``model/``,
``checkpoints/``, ``cli/``, ``config/``, ``interop/``, ``text/``, ``profiler/``, ``attacks/``
(hostile input, each case in its own bounded process) and ``project/`` (the tree itself:
imports, docs, packaging)), ``data/``, ``distributed/`` (MPI) and ``examples/``.  A file's name
says what it tests.  A skip says why through ``support.requires``.

The tests test the *installed* ``neonlite`` (a wheel, or ``pip install -e``): the checkout's root
is never on ``sys.path``, because its ``neonlite/`` folder is not the whole package (the
installed one maps ``backends/``, ``layers/`` and ``kernels/`` into it).  ``tests/`` is on the
path for the ``support`` package, and ``benchmarks`` is
imported from the checkout by its own folder.  ``PYTHONSAFEPATH=1`` keeps the Python
subprocesses that tests start (``python -m neonlite.cli``, ``python -c``) from putting their
working directory first on their path.  With ``NEONLITE_TEST_INSTALLED=1`` (CI) the run stops
unless ``neonlite`` comes from outside the checkout.
"""
import importlib.util
import os
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT]
sys.path.insert(0, str(TESTS))
os.environ.setdefault("PYTHONSAFEPATH", "1")


def _import_benchmarks():
    spec = importlib.util.spec_from_file_location(
        "benchmarks", ROOT / "benchmarks" / "__init__.py",
        submodule_search_locations=[str(ROOT / "benchmarks")])
    module = importlib.util.module_from_spec(spec)
    sys.modules["benchmarks"] = module
    spec.loader.exec_module(module)


if "benchmarks" not in sys.modules and (ROOT / "benchmarks" / "__init__.py").is_file():
    _import_benchmarks()

import neonlite  # noqa: E402
from support.harness import BACKENDS, make_backend, require_backend  # noqa: E402

NEONLITE_FROM = Path(neonlite.__file__).resolve().parent


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: a test that takes over ~60 s (still run in CI)")
    if os.environ.get("NEONLITE_TEST_INSTALLED") == "1" and NEONLITE_FROM.is_relative_to(ROOT):
        pytest.exit(f"NEONLITE_TEST_INSTALLED=1, but neonlite was imported from the checkout "
                    f"({NEONLITE_FROM}), not from an installed wheel", returncode=4)


def pytest_report_header(config):
    return f"neonlite {neonlite.__version__} from {NEONLITE_FROM}"


@pytest.fixture(params=BACKENDS)
def backend_name(request):
    """Each registered backend's name; skipped, with the reason, where it cannot run."""
    require_backend(request.param)
    return request.param


@pytest.fixture
def be(backend_name):
    """A float32 backend of batch size 4 (seed 0) for each available backend."""
    return make_backend(backend_name, batch_size=4, seed=0)


@pytest.fixture
def keep_backend():
    """The current backend as it was before the test, whatever the test made current (a command
    run in-process through ``neonlite.cli.main`` makes its own)."""
    previous = neonlite.backends._current
    yield
    neonlite.backends._current = previous


@pytest.fixture
def keep_threads():
    """The CPU backend's OpenMP thread count as it was before the test (a test that sets its
    own leaves it behind otherwise); list it after ``keep_backend``, whose restore runs last."""
    from neonlite.backends.cpu.threads import openmp_threads
    threads = openmp_threads()
    yield
    neonlite.gen_backend("cpu", batch_size=1).set_threads(threads)
