"""The test needs on C kernels skip only where the kernel cannot exist here (no compiler, the
kernels switched off, no libjpeg): a kernel source that fails to compile makes the tests that
need it fail, never skip."""
import pytest

from neonlite.kernels import build
from neonlite.kernels.toolchain import CompileError
from support import requires


class BrokenBuilder:
    def load_cpu(self, variant):
        raise CompileError(variant.name, "int f() { return 0 }", "error: expected ';'",
                           ["cc", "-c"], 1)


@requires.requires("compiler")
@pytest.mark.parametrize("need", ["jpeg_kernel", "resize_avx2", "resize_avx512"])
def test_a_kernel_that_does_not_compile_fails_its_tests(need, monkeypatch):
    monkeypatch.delenv("NEONLITE_CPU_KERNELS", raising=False)
    monkeypatch.delenv("NEONLITE_JPEG_KERNEL", raising=False)
    monkeypatch.setattr(build, "default_builder", lambda: BrokenBuilder())
    with pytest.raises(CompileError, match="jpeg_roi|augment"):
        requires.NEEDS[need]()


@pytest.mark.parametrize("need", ["jpeg_kernel", "resize_avx2"])
def test_kernels_switched_off_are_a_reason_to_skip(need, monkeypatch):
    monkeypatch.setenv("NEONLITE_CPU_KERNELS", "0")
    monkeypatch.setattr(build, "default_builder", lambda: BrokenBuilder())
    assert "NEONLITE_CPU_KERNELS=0" in requires.NEEDS[need]()
