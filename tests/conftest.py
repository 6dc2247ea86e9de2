"""Shared pytest set-up: the ``slow`` marker and the per-backend fixture (see ``harness.py``)."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import BACKENDS, make_backend, require_backend  # noqa: E402


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: a test that takes over ~60 s (still run in CI)")


@pytest.fixture(params=BACKENDS)
def backend_name(request):
    """Each registered backend's name; skipped, with the reason, where it cannot run."""
    require_backend(request.param)
    return request.param


@pytest.fixture
def be(backend_name):
    """A float32 backend of batch size 4 (seed 0) for each available backend."""
    return make_backend(backend_name, batch_size=4, seed=0)
