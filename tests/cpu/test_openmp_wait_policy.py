"""The OpenMP wait policy the CPU backend loads OpenMP with: a short spin when MKL runs the
GEMMs on the kernels' OpenMP runtime, passive waiting when numpy's BLAS threads need the cores
between the kernels, and whatever the user chose when they set a policy; the variable is set
only while OpenMP loads."""
import os

import pytest

from neonlite.backends.cpu import build
from neonlite.backends.cpu.blas import GemmThreads
from neonlite.backends.cpu.mkl_blas import MKLGemm, load_mkl

POLICY_VARIABLES = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")


@pytest.fixture
def no_policy(monkeypatch):
    for name in POLICY_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def _inside(gemm):
    with build._openmp_wait_policy(gemm):
        return {name: os.environ.get(name) for name in POLICY_VARIABLES}


def test_numpy_blas_gets_passive_waiting(no_policy):
    assert _inside(GemmThreads()) == {"OMP_WAIT_POLICY": "PASSIVE", "GOMP_SPINCOUNT": None}
    assert not any(name in os.environ for name in POLICY_VARIABLES)


def test_mkl_gets_a_short_spin(no_policy):
    if load_mkl() is None:
        pytest.skip("the mkl wheel is not installed")
    assert _inside(MKLGemm()) == {"OMP_WAIT_POLICY": None,
                                  "GOMP_SPINCOUNT": str(build.SPIN_COUNT)}
    assert not any(name in os.environ for name in POLICY_VARIABLES)


@pytest.mark.parametrize("name,value", [("OMP_WAIT_POLICY", "active"),
                                        ("GOMP_SPINCOUNT", "0")])
def test_a_policy_the_user_set_is_kept(no_policy, monkeypatch, name, value):
    monkeypatch.setenv(name, value)
    for gemm in (GemmThreads(),) + ((MKLGemm(),) if load_mkl() is not None else ()):
        inside = _inside(gemm)
        assert inside[name] == value
        assert all(inside[other] is None for other in POLICY_VARIABLES if other != name)
